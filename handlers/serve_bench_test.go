package handlers

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/resp"
	"go.uber.org/zap"
)

// BenchmarkServeINCR drives the whole server path of INCR (resp parser, command table,
// segment generator, reply writer, socket I/O) over loopback from one raw client that sends a
// pre-built pipeline and counts reply lines, so the client costs little and allocates
// nothing. The baseline, BenchmarkServeBareAtomic, is the same client against a resp server
// whose handler only does atomic.Int64.Add: the difference is the cost of the command layer
// and the segment core. Profile with:
//
//	go test -run '^$' -bench 'Serve' -cpu 1 -cpuprofile cpu.out ./handlers/
func BenchmarkServeINCR(b *testing.B) {
	for _, p := range []int{1, 16} {
		b.Run(fmt.Sprintf("P%d", p), func(b *testing.B) {
			s := startServer(b, serverOpts{autoCreate: true})
			driveINCR(b, s.addr, p)
		})
	}
}

func BenchmarkServeBareAtomic(b *testing.B) {
	for _, p := range []int{1, 16} {
		b.Run(fmt.Sprintf("P%d", p), func(b *testing.B) {
			driveINCR(b, startBare(b), p)
		})
	}
}

// BenchmarkServeINCRRatio interleaves blocks of INCRs against the bare atomic server and
// against leafd, and reports bare time / leafd time as "ratio" (1 means the command layer and
// the segment core cost nothing measurable beside the network path), so that the noise of a
// shared machine hits both alike.
func BenchmarkServeINCRRatio(b *testing.B) {
	for _, p := range []int{1, 16} {
		b.Run(fmt.Sprintf("P%d", p), func(b *testing.B) {
			s := startServer(b, serverOpts{autoCreate: true})
			leafd := incrClient(b, s.addr, p)
			bare := incrClient(b, startBare(b), p)
			benchRatio(b, p, bare, leafd)
		})
	}
}

// BenchmarkServeModels is BenchmarkServeBareAtomic on each server model (resp.Config.Model):
//
//	go test -run '^$' -bench 'ServeModels' -cpu 1 ./handlers/
func BenchmarkServeModels(b *testing.B) {
	for _, m := range []string{resp.ModelGoroutine, resp.ModelEventLoop} {
		for _, p := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/P%d", m, p), func(b *testing.B) {
				driveINCR(b, startBareModel(b, m), p)
			})
		}
	}
}

// startBare starts a resp server whose handler answers every command with atomic.Int64.Add.
func startBare(b *testing.B) string { return startBareModel(b, "") }

func startBareModel(b *testing.B, model string) string {
	b.Helper()
	var n atomic.Int64
	cfg := resp.DefaultConfig()
	if model != "" {
		cfg.Model = model
	}
	srv, err := resp.NewServer(cfg, resp.HandlerFunc(func(c *resp.Conn, args [][]byte) {
		c.WriteInt(n.Add(1))
	}), zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	addr, _ := testkit.ServeLocal(b, srv)
	return addr
}

// benchRatio runs base and subject (each sends n pipelined requests, at most p) in
// alternating blocks of 64 batches until b.N requests have gone, and reports the time of
// base over the time of subject as "ratio": both run in the same moments of a shared machine.
func benchRatio(b *testing.B, p int, base, subject func(n int)) {
	b.Helper()
	const block = 64 // batches per block
	var tBase, tSubject time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 2 * block * p {
		t0 := time.Now()
		for range block {
			base(p)
		}
		t1 := time.Now()
		for range block {
			subject(p)
		}
		tBase += t1.Sub(t0)
		tSubject += time.Since(t1)
	}
	b.ReportMetric(float64(tBase)/float64(tSubject), "ratio")
}

// driveINCR sends b.N INCRs in batches of p over one connection; ns/op is per INCR.
func driveINCR(b *testing.B, addr string, p int) {
	b.Helper()
	batch := incrClient(b, addr, p)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += p {
		batch(min(p, b.N-i))
	}
}

// incrClient dials addr and returns a function that sends n (at most p) pipelined INCRs and
// waits for their replies. It warms the connection up first.
func incrClient(b *testing.B, addr string, p int) func(n int) {
	b.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	const one = "*2\r\n$4\r\nINCR\r\n$5\r\nbench\r\n"
	req := []byte(strings.Repeat(one, p))
	buf := make([]byte, 64<<10)
	batch := func(n int) {
		if _, err := conn.Write(req[:n*len(one)]); err != nil {
			b.Fatal(err)
		}
		for lines := 0; lines < n; {
			k, err := conn.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range buf[:k] {
				if c == '\n' {
					lines++
				}
			}
		}
	}
	for range 1000 { // warm up: first segment loaded, buffers grown
		batch(p)
	}
	return batch
}
