package handlers

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestOrderedFollowerPassThroughRESP3: a RESP3 client of the follower gets the leader's
// replies right, those passed through as bytes (integers, IDS.NEXT's bulk string) and those
// re-encoded (IDS.SEGMENT's array), in the pipeline's order, as a RESP2 client does.
func TestOrderedFollowerPassThroughRESP3(t *testing.T) {
	_, a, b := twoOrderedWith(t, ordOpts{manual: true, loops: 1})
	ctx := context.Background()
	for _, proto := range []int{3, 2} {
		c := redis.NewClient(&redis.Options{Addr: b.addr, Protocol: proto, MaxRetries: -1, PoolSize: 1})
		t.Cleanup(func() { _ = c.Close() })
		mustIncr(t, c, "seq")
		n := mustIncr(t, a.client(t), "seq") + 1
		var incr, incrBy *redis.IntCmd
		var next, seg *redis.Cmd
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			incr = p.Incr(ctx, "seq")
			next = p.Do(ctx, "IDS.NEXT", "seq")
			seg = p.Do(ctx, "IDS.SEGMENT", "seq", 2)
			incrBy = p.IncrBy(ctx, "seq", 3)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(incr.Val(), next.Val(), seg.Val(), incrBy.Val())
		if want := fmt.Sprint(n, fmt.Sprint(n+1), []any{n + 2, n + 3}, n+6); got != want {
			t.Fatalf("RESP%d: got %s, want %s", proto, got, want)
		}
	}
}

// TestOrderedFollowerBigPipeline: a pipeline far longer than one forwarded call (and whose
// replies take more than one read of the leader's socket), inline commands among them (sent
// on re-encoded), runs of one command repeated (not parsed again), gets every reply in
// order: consecutive IDs, byte for byte as the leader writes them.
func TestOrderedFollowerBigPipeline(t *testing.T) {
	_, a, b := twoOrderedWith(t, ordOpts{manual: true, loops: 1})
	nc, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(nc)
	if _, err := io.WriteString(nc, "INCR seq\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	n := mustIncr(t, a.client(t), "seq") + 1
	const count = 5000
	var req, want strings.Builder
	for i := range count {
		id := fmt.Sprint(n + int64(i))
		switch {
		case i%1000 == 999:
			req.WriteString("INCR seq\r\n")
			fmt.Fprintf(&want, ":%s\r\n", id)
		case i%3 == 1:
			req.WriteString("*2\r\n$8\r\nIDS.NEXT\r\n$3\r\nseq\r\n")
			fmt.Fprintf(&want, "$%d\r\n%s\r\n", len(id), id)
		default:
			req.WriteString("*2\r\n$4\r\nINCR\r\n$3\r\nseq\r\n")
			fmt.Fprintf(&want, ":%s\r\n", id)
		}
	}
	// The same INCRBY repeated: joined without parsing it again, up to maxJoinedIDs per call.
	// (Each reply is the highest of 100 IDs: at least 100 above the one before.)
	for range 100 {
		req.WriteString("*3\r\n$6\r\nINCRBY\r\n$3\r\nseq\r\n$3\r\n100\r\n")
	}
	w0 := b.h.fwd.Requests()
	go func() { _, _ = io.WriteString(nc, req.String()) }()
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		for i := range got {
			if got[i] != want.String()[i] {
				t.Fatalf("replies differ at byte %d: got %.60q, want %.60q", i, got[i:], want.String()[i:])
			}
		}
	}
	last := n + count - 1
	for i := range 100 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		var v int64
		if _, err := fmt.Sscanf(line, ":%d\r\n", &v); err != nil || v < last+100 {
			t.Fatalf("INCRBY %d: %q after %d", i, line, last)
		}
		last = v
	}
	if r := b.h.fwd.Requests() - w0; r != count+100 {
		t.Fatalf("%d requests forwarded, want %d", r, count+100)
	}
}

// TestOrderedFollowerForwardAllocs: a follower forwarding pipelines on its event loop (and
// the leader answering them, in this process too) allocates nothing per request once warm:
// the client's commands and the leader's replies pass through as bytes.
func TestOrderedFollowerForwardAllocs(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	_, a, b := twoOrderedWith(t, ordOpts{manual: true, loops: 1})
	ctx := context.Background()
	// A step far above the test's IDs: no segment is fetched while it measures.
	if err := a.client(t).Do(ctx, "IDS.CREATE", "big", "STEP", 1000000, "ORDERED").Err(); err != nil {
		t.Fatal(err)
	}
	a.round(t)
	_, _ = incr(t, b.client(t), "big") // b learns of the tag: TRYAGAIN until its lease call
	b.round(t)
	nc, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	req := []byte(strings.Repeat("*2\r\n$4\r\nINCR\r\n$3\r\nbig\r\n", 16))
	buf := make([]byte, 4096)
	round := func() {
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 16; {
			n, err := nc.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += bytes.Count(buf[:n], []byte("\r\n"))
		}
	}
	for range 200 {
		round()
	}
	const rounds = 500
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range rounds {
		round()
	}
	runtime.ReadMemStats(&m1)
	per := float64(m1.Mallocs-m0.Mallocs) / (rounds * 16)
	t.Logf("%d allocations in %d forwarded requests", m1.Mallocs-m0.Mallocs, rounds*16)
	if per > 0.01 {
		t.Fatalf("%.3f allocations per forwarded request, want 0", per)
	}
}
