package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// listenRun is a RunFunc that binds --addr and --http-addr as leafd does, logs their bound
// addresses in leafd's start lines and serves until its context ends; inUse runs (counted
// from 1) exit with "address already in use" instead.
func listenRun(runs *atomic.Int32, seen chan<- []string, inUse ...int32) RunFunc {
	return func(ctx context.Context, args []string, out io.Writer) error {
		n := runs.Add(1)
		if seen != nil {
			seen <- args
		}
		for _, k := range inUse {
			if n == k {
				return errors.New("listen: listen tcp " + FlagValue(args, "--addr") + ": bind: address already in use")
			}
		}
		ln, err := net.Listen("tcp", FlagValue(args, "--addr"))
		if err != nil {
			return err
		}
		defer ln.Close()
		if h := FlagValue(args, "--http-addr"); h != "" {
			hl, err := net.Listen("tcp", h)
			if err != nil {
				return err
			}
			defer hl.Close()
			fmt.Fprintf(out, "{\"msg\":\"admin HTTP ready\",\"http_addr\":%q}\n", hl.Addr().String())
		}
		fmt.Fprintf(out, "{\"msg\":%q,\"addr\":%q}\n", ReadyMsg, ln.Addr().String())
		<-ctx.Done()
		return nil
	}
}

// TestStartOnPortZero: without --addr and --http-addr the first run binds port 0 and the
// harness reads both ports from its log; a restart binds those same ports by number.
func TestStartOnPortZero(t *testing.T) {
	var runs atomic.Int32
	seen := make(chan []string, 2)
	l := StartInProcess(t, listenRun(&runs, seen))
	if first := <-seen; FlagValue(first, "--addr") != "127.0.0.1:0" || FlagValue(first, "--http-addr") != "127.0.0.1:0" {
		t.Fatalf("first run's args %v, want --addr and --http-addr 127.0.0.1:0", first)
	}
	addr, httpAddr := l.Addr, l.HTTPAddr
	if isPortZero(addr) || isPortZero(httpAddr) || addr == "" || httpAddr == "" {
		t.Fatalf("Addr %q HTTPAddr %q, want the ports the run was given", addr, httpAddr)
	}
	if err := l.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	l.Restart()
	if again := <-seen; FlagValue(again, "--addr") != addr || FlagValue(again, "--http-addr") != httpAddr {
		t.Fatalf("restart's args %v, want --addr %s --http-addr %s (the first run's ports)", again, addr, httpAddr)
	}
	if l.Addr != addr || l.HTTPAddr != httpAddr {
		t.Fatalf("after the restart: Addr %s HTTPAddr %s, want %s %s", l.Addr, l.HTTPAddr, addr, httpAddr)
	}
}

// TestRestartRetriesTakenPort: a restart that finds the instance's port taken for a moment
// (the run exits with "address already in use") is started again on the same port.
func TestRestartRetriesTakenPort(t *testing.T) {
	var runs atomic.Int32
	l := StartInProcess(t, listenRun(&runs, nil, 2))
	addr := l.Addr
	if err := l.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	l.Restart()
	if got := runs.Load(); got != 3 {
		t.Fatalf("runs: got %d, want 3 (the restart's first run found the port taken)", got)
	}
	if l.Addr != addr {
		t.Fatalf("after the retried restart: Addr %s, want %s", l.Addr, addr)
	}
}

// TestStartPicksPortsAgain: an instance that names itself by its listen address (here with
// ZooKeeper and no --advertise-addr) gets a picked port; a first run that finds it taken by
// another process is started again on a port picked anew.
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
	l := StartInProcess(t, run, "--zk-addrs", "127.0.0.1:2181", "--http-addr", "")
	if got := runs.Load(); got != 2 {
		t.Fatalf("runs: got %d, want 2 (the first exited on a taken port)", got)
	}
	if isPortZero(firstAddr) || l.Addr == firstAddr || FlagValue(l.Args, "--addr") != l.Addr {
		t.Fatalf("after the retry: addr %s (first %s), args %v; want a picked port, then a new one in both", l.Addr, firstAddr, l.Args)
	}
}
