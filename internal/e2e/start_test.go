package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
)

// TestStartPicksPortsAgain: a first run that finds its picked port taken by another process
// (it exits with "address already in use") is started again on ports picked anew.
func TestStartPicksPortsAgain(t *testing.T) {
	var runs atomic.Int32
	var firstAddr string
	run := func(ctx context.Context, args []string, out io.Writer) error {
		addr := FlagValue(args, "--addr")
		if runs.Add(1) == 1 {
			firstAddr = addr
			return errors.New("listen: listen tcp " + addr + ": bind: address already in use")
		}
		fmt.Fprintf(out, "{\"msg\":%q,\"addr\":%q}\n", ReadyMsg, addr)
		<-ctx.Done()
		return nil
	}
	l := StartInProcess(t, run)
	if got := runs.Load(); got != 2 {
		t.Fatalf("runs: got %d, want 2 (the first exited on a taken port)", got)
	}
	if l.Addr == firstAddr || FlagValue(l.Args, "--addr") != l.Addr {
		t.Fatalf("after the retry: addr %s (first %s), args %v; want a new port in both", l.Addr, firstAddr, l.Args)
	}
}
