// Package volume holds leafd's end-to-end tests whose subject is volume: many contended
// refills over several instances, a million marks through the admin tools. They are a
// package of their own so that go test runs them beside cmd/leafd's other tests, which they
// would otherwise lengthen by their minute each; they drive the command of cmd/leafd.
package volume
