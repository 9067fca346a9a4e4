//go:build linux && gnet

package handlers

import (
	"github.com/leafd/leafd/resp"
	"go.uber.org/goleak"
)

// Built with -tags gnet, the handlers' server tests run on the gnet/v2 variant of the event
// loop (resp.ModelGnet) unless a test names its model (docs/BENCHMARKS.md, "The server models").
const testModel = resp.ModelGnet

// gnetPoolGoroutines are the two goroutines of the worker pool gnet/v2 creates when its
// package is initialised: process-wide, not started by a test.
var gnetPoolGoroutines = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
	goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
}
