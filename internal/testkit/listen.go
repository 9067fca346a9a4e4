package testkit

import (
	"net"
	"testing"
)

// Listen returns a TCP listener on 127.0.0.1:0 (the kernel picks the port: no pick-then-bind
// race), closed when the test ends.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}
