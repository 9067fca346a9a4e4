package boltstore

import "github.com/leafd/leafd/segment/segtest"

// The generator helpers these tests run with (package segtest).
var (
	newFakeClock = segtest.FakeClock
	testConfig   = segtest.Config
	mustNext     = segtest.MustNext
	waitFor      = segtest.WaitFor
	waitIdle     = segtest.WaitIdle
)
