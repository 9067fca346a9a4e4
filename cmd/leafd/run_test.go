package main

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// TestRunAwaitsItsGoroutines: run owns every goroutine it starts (the RESP and admin accept
// loops, the HTTP shutdown, the generators' background work): once it returns, none is left.
func TestRunAwaitsItsGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	cfg, err := loadConfig([]string{"--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--warm-tags", "0"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, zap.NewNop(), func(a net.Addr) { ready <- a }) }()
	select {
	case a := <-ready:
		c, err := net.Dial("tcp", a.String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	case err := <-done:
		t.Fatalf("run ended before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("run not ready after 60s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not return 60s after its context ended")
	}
	goleak.VerifyNone(t, before)
}
