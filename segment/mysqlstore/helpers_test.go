package mysqlstore

import "github.com/leafd/leafd/segment/segtest"

// The generator helpers these tests run with (package segtest).
var (
	newFakeClock = segtest.FakeClock
	testConfig   = segtest.Config
	newTestGen   = segtest.NewGen
	mustNext     = segtest.MustNext
	waitFor      = segtest.WaitFor
	newFakeMarks = segtest.NewMarks
)
