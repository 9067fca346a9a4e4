package testkit

import (
	"context"
	"net"
	"testing"
)

// fakeServer serves until Shutdown and records the order of what happens to it.
type fakeServer struct {
	ln    net.Listener
	quit  chan struct{}
	steps []string
}

func (s *fakeServer) Listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	return ln.Addr(), nil
}

func (s *fakeServer) Serve() error {
	<-s.quit
	s.steps = append(s.steps, "served")
	return nil
}

func (s *fakeServer) Shutdown(ctx context.Context) error {
	s.steps = append(s.steps, "shutdown")
	close(s.quit)
	return s.ln.Close()
}

func TestServeLocalStopsOnceInOrder(t *testing.T) {
	srv := &fakeServer{quit: make(chan struct{})}
	addr, stop := ServeLocal(t, srv, func() error { srv.steps = append(srv.steps, "closed"); return nil })
	if c, err := net.Dial("tcp", addr); err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	} else {
		_ = c.Close()
	}
	stop()
	stop()
	if got, want := len(srv.steps), 3; got != want {
		t.Fatalf("steps %v: got %d, want %d", srv.steps, got, want)
	}
	for i, want := range []string{"shutdown", "served", "closed"} {
		if srv.steps[i] != want {
			t.Fatalf("step %d of %v: got %q, want %q", i, srv.steps, srv.steps[i], want)
		}
	}
}
