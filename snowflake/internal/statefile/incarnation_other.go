//go:build !linux

package statefile

// bootID is unknown outside Linux: every open of a data dir is then a new incarnation.
var bootID = func() string { return "" }
