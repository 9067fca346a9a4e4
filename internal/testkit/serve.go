package testkit

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// Server is what Serve runs: the methods of resp.Server it calls (an interface, so that
// testkit does not import the packages whose tests use it).
type Server interface {
	Serve() error
	Shutdown(ctx context.Context) error
}

// ListenServer is a Server that ServeLocal can bind to a port.
type ListenServer interface {
	Server
	Listen(addr string) (net.Addr, error)
}

// ShutdownTimeout bounds the Shutdown that a stop func of Serve runs.
const ShutdownTimeout = 5 * time.Second

// Serve runs srv.Serve on its own goroutine and returns the func that stops it: Shutdown
// (within ShutdownTimeout), a wait for Serve to return, then closers in order. The stop
// func runs once however often it is called, and at the test's cleanup if not before.
func Serve(t testing.TB, srv Server, closers ...func() error) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = srv.Serve(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
			defer cancel()
			_ = srv.Shutdown(ctx)
			<-done
			for _, c := range closers {
				_ = c()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// ServeLocal listens on 127.0.0.1:0 (failing the test when it cannot), then Serves srv:
// the address, and the stop func of Serve.
func ServeLocal(t testing.TB, srv ListenServer, closers ...func() error) (addr string, stop func()) {
	t.Helper()
	a, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return a.String(), Serve(t, srv, closers...)
}
