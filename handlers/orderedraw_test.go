package handlers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
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
// on re-encoded), gets every reply in order: consecutive IDs, byte for byte as the leader
// writes them.
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
}
