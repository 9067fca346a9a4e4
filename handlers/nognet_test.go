//go:build !linux || !gnet

package handlers

import "go.uber.org/goleak"

// testModel is the resp server model of the server tests that do not name one: resp's default
// here (-tags gnet: the gnet variant, gnet_test.go).
const testModel = ""

var gnetPoolGoroutines []goleak.Option
