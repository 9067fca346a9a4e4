package handlers

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"time"
)

// BenchmarkServeManyTags runs the whole server path in one process with 100,000 tags held,
// loaded by INCR through RESP on the embedded store (and marks.db, as leafd keeps them): the Go
// heap per held tag after a GC, then INCR -P 16 on one tag and round-robin over all tags,
// alternating blocks on two connections so that the noise of a shared machine hits both alike.
// It reports ns per INCR of each and "ratio" (one tag's time / round-robin time; 1 means
// round-robin costs nothing more). Profile with
//
//	LEAFD_BENCH_CPUPROFILE=cpu.out go test -run '^$' -bench ServeManyTags -benchtime 1000x ./handlers/
//
// (each iteration is 1024 INCRs of each kind).
//
// The data dir is on /dev/shm when it exists (100,000 tags are 200,000 fsynced bbolt
// commits).
func BenchmarkServeManyTags(b *testing.B) {
	const n, p = 100_000, 16
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "leafd-manytags-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(d) })
		dir = d
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := startServer(b, serverOpts{autoCreate: true, dir: dir, markFile: true, noWarm: true})
	one := tagsClient(b, s.addr, 1, p, 0)
	many := tagsClient(b, s.addr, n, p, 0)
	// Prime on 8 connections: every tag created and its first segment loaded.
	const primers = 8
	t0 := time.Now()
	var wg sync.WaitGroup
	for k := range primers {
		c := tagsClient(b, s.addr, n, p, k*n/primers)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range (n/primers + p - 1) / p {
				c() // UNAVAILABLE (a load slower than the wait timeout) is retried below
			}
		}()
	}
	wg.Wait()
	prime := time.Since(t0)
	// Passes until every tag is held: a load slower than the wait timeout answered
	// UNAVAILABLE, and a tag-list refresh that read the list before a tag's auto-created row
	// was committed drops that tag's buffer (it is loaded again on its next request).
	for pass := 0; ; pass++ {
		errs := 0
		for range n / p {
			errs += many()
		}
		if errs == 0 && s.seg.Stats().Tags == n {
			break
		}
		if pass == 5 {
			b.Fatalf("%d tags held after priming, want %d (%d errors in the last pass)", s.seg.Stats().Tags, n, errs)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perTag := float64(after.HeapAlloc-before.HeapAlloc) / n
	if f := os.Getenv("LEAFD_BENCH_CPUPROFILE"); f != "" { // the measured loop only, no priming
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = out.Close() }()
	}
	var gc0 runtime.MemStats
	runtime.ReadMemStats(&gc0)

	const block = 64 // batches per block
	var tOne, tMany time.Duration
	var ops, errs int
	for b.Loop() { // b.Loop runs the function once: the priming above is not repeated
		t1 := time.Now()
		for range block {
			errs += one()
		}
		t2 := time.Now()
		for range block {
			errs += many()
		}
		tOne += t2.Sub(t1)
		tMany += time.Since(t2)
		ops += block * p
	}
	if errs > 0 {
		b.Fatalf("%d error replies in the measured loop", errs)
	}
	perBlock := float64(ops)
	var gc1 runtime.MemStats
	runtime.ReadMemStats(&gc1)
	b.ReportMetric(perTag, "B/tag") // after the loop: b.Loop's first call drops earlier metrics
	b.ReportMetric(prime.Seconds(), "prime-s")
	b.ReportMetric(float64(gc1.NumGC-gc0.NumGC), "GCs")
	b.ReportMetric(float64(tOne.Nanoseconds())/perBlock, "ns/incr-one")
	b.ReportMetric(float64(tMany.Nanoseconds())/perBlock, "ns/incr-rr")
	b.ReportMetric(float64(tOne)/float64(tMany), "ratio")
}

// tagsClient dials addr and returns a function that sends p pipelined INCRs, round-robin
// over the tags tag000000 .. tag<n-1> from tag<start>, waits for their replies and returns
// how many were errors. Every request has the
// same length, and the request buffer repeats its first p requests at the end, so each batch
// is one contiguous write and the client allocates nothing.
func tagsClient(b *testing.B, addr string, n, p, start int) func() int {
	b.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	req := func(i int) string { return fmt.Sprintf("*2\r\n$4\r\nINCR\r\n$9\r\ntag%06d\r\n", i%n) }
	size := len(req(0))
	all := make([]byte, 0, (n+p)*size)
	for i := range n + p {
		all = append(all, req(i)...)
	}
	buf := make([]byte, 64<<10)
	next := start
	return func() int {
		errs := 0
		if _, err := conn.Write(all[next*size : (next+p)*size]); err != nil {
			b.Fatal(err)
		}
		next = (next + p) % n
		for lines := 0; lines < p; {
			k, err := conn.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range buf[:k] {
				switch c {
				case '\n':
					lines++
				case '-':
					errs++
				}
			}
		}
		return errs
	}
}
