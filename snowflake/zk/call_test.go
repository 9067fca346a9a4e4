package zk

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	gozk "github.com/go-zookeeper/zk"
)

// An operation run by call belongs to its Source: call returns when the caller's context ends,
// but Close's wait (s.calls) lasts until the operation has returned, and after Close no
// operation starts.
func TestCallGoroutineOwnedBySource(t *testing.T) {
	s := &Source{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release := make(chan struct{})
	var done atomic.Bool
	_, err := call(s, ctx, func() (int, error) {
		<-release
		done.Store(true)
		return 1, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("call with an ended context: got %v, want context.Canceled", err)
	}
	waited := make(chan bool)
	go func() {
		s.calls.Wait()
		waited <- done.Load()
	}()
	close(release)
	if !<-waited {
		t.Fatal("the wait for the call goroutines returned before the operation ended")
	}

	s.callMu.Lock()
	s.callsEnded = true
	s.callMu.Unlock()
	ran := false
	_, err = call(s, context.Background(), func() (int, error) { ran = true; return 1, nil })
	if ran || !errors.Is(err, gozk.ErrClosing) {
		t.Fatalf("call after Close: ran %v, err %v; want ErrClosing without running", ran, err)
	}
}
