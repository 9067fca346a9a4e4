package storeerr

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestWithoutDriver: with no driver set (this package's tests import none), a MySQL error
// read by its text keeps its class and number, and a driver's types are not needed for the
// errors of the file system or the network.
func TestWithoutDriver(t *testing.T) {
	if drv.Load() != nil {
		t.Fatal("a driver is set")
	}
	err := fmt.Errorf("allocate: %w", errors.New("Error 1045 (28000): Access denied for user 'leaf'@'h'"))
	if got := Classify(err); got != Auth {
		t.Errorf("Classify = %q, want auth", got)
	}
	if d := Describe(err); !strings.Contains(d, "MySQL error 1045") {
		t.Errorf("Describe = %q, want the number", d)
	}
	if got := Classify(errors.New("driver: bad connection")); got != Unreachable {
		t.Errorf("bad connection: %q", got)
	}
}

// TestDriverOrder: Classify reads a driver's server error number before errno and the
// text, and the driver's own errors after errno and the context's deadline.
func TestDriverOrder(t *testing.T) {
	server := errors.New("server said 1040")
	lost := errors.New("lost")
	t.Cleanup(func() { drv.Store(nil) })
	SetDriver(Driver{
		Code: func(err error) (int, string, bool) {
			if errors.Is(err, server) {
				return 1040, "Too many connections", true
			}
			return 0, "", false
		},
		Class: func(err error) Class {
			if errors.Is(err, lost) {
				return Unreachable
			}
			return None
		},
	})
	if got := Classify(fmt.Errorf("x: %w: connection refused", server)); got != Busy {
		t.Errorf("server error with a refused text: %q, want busy (the number first)", got)
	}
	if got := Classify(fmt.Errorf("x: %w", lost)); got != Unreachable {
		t.Errorf("driver error: %q, want unreachable", got)
	}
	if d := Describe(&Error{Class: Busy, Err: server}); !strings.Contains(d, "MySQL error 1040") {
		t.Errorf("Describe of a classified error = %q, want the driver's number", d)
	}
}
