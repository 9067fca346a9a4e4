//go:build linux

package ordered

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLoopForwarderMatchesCalls: many calls written together, each of many requests, get
// their own replies, in their order (the leader echoes each request's own word, so a reply
// given to the wrong call or slot shows), in few writes; arrays are parsed whole.
func TestLoopForwarderMatchesCalls(t *testing.T) {
	leader := startFakeLeader(t, "pw")
	addr := leader.ln.Addr().String()
	f := NewForwarder(ForwarderConfig{Password: "pw", Timeout: 5 * time.Second})
	defer f.Close()
	m := newManualLoop(t, f)
	for round := range 3 {
		w0 := f.Writes()
		var calls []*started
		for i := range 40 {
			var reqs [][][]byte
			for j := range 1 + i%7 {
				reqs = append(reqs, cmd("ECHO", fmt.Sprintf("r%d-c%d-q%d", round, i, j)))
			}
			reqs = append(reqs, cmd("SEG"))
			calls = append(calls, m.start(f, addr, reqs...))
		}
		m.until(5*time.Second, "every call answered", func() bool {
			for _, s := range calls {
				if !s.done {
					return false
				}
			}
			return true
		})
		for i, s := range calls {
			if s.c.Err != nil {
				t.Fatalf("round %d call %d: %v", round, i, s.c.Err)
			}
			for j, r := range s.c.Replies[:len(s.c.Replies)-1] {
				if want := fmt.Sprintf("r%d-c%d-q%d", round, i, j); r.Kind != '$' || string(r.Str) != want {
					t.Fatalf("round %d call %d reply %d: got %c %q, want %q", round, i, j, r.Kind, r.Str, want)
				}
			}
			if r := s.c.Replies[len(s.c.Replies)-1]; r.Kind != '*' || len(r.Elems) != 2 || string(r.Elems[1].Str) != "abc" {
				t.Fatalf("round %d call %d: the SEG reply: %+v", round, i, r)
			}
			f.Release(s.c)
		}
		if w := f.Writes() - w0; round > 0 && w != 1 {
			t.Fatalf("round %d: 40 calls in %d writes, want 1 (the round's calls in one write)", round, w)
		}
	}
	if n := leader.conns.Load(); n != 1 {
		t.Fatalf("%d connections to the leader, want 1 (one per loop)", n)
	}
}

// TestLoopForwarderPartialReply: replies cut anywhere by the reads (inside a line, inside a
// bulk string, between an array's elements) are matched only once whole: no call finishes
// early, and every reply is right once the rest is in.
func TestLoopForwarderPartialReply(t *testing.T) {
	leader, addr, f, m := startLoopRig(t, ForwarderConfig{Timeout: 5 * time.Second})
	a := m.start(f, addr, cmd("INCR", "t"), cmd("SEG"))
	b := m.start(f, addr, cmd("INCR", "t"))
	c := leader.accept(m)
	m.lf.Tick(time.Now()) // the queued calls go out once the link is up
	got := make(chan []string, 1)
	go func() { got <- readRequests(t, c, 3) }()
	m.until(5*time.Second, "the requests", func() bool { return len(got) == 1 })
	if reqs := <-got; strings.Join(reqs, ",") != "INCR t,SEG,INCR t" {
		t.Fatalf("requests: %q", reqs)
	}
	replies := ":41\r\n*2\r\n:42\r\n$11\r\nhello world\r\n:43\r\n"
	aEnd := strings.Index(replies, ":43")
	cuts := []int{2, 6, 10, 16, 24, aEnd - 1, aEnd + 2, len(replies)}
	prev := 0
	for _, cut := range cuts {
		if _, err := io.WriteString(c, replies[prev:cut]); err != nil {
			t.Fatal(err)
		}
		r0 := m.readies
		m.until(5*time.Second, "the read of a part", func() bool { return m.readies > r0 })
		prev = cut
		if cut < aEnd && a.done {
			t.Fatalf("after %d bytes %q: the first call finished on a partial reply", cut, replies[:cut])
		}
		if cut < len(replies) && b.done {
			t.Fatalf("after %d bytes: the second call finished on a partial reply", cut)
		}
	}
	m.until(time.Second, "both calls", func() bool { return a.done && b.done })
	if a.c.Err != nil || b.c.Err != nil {
		t.Fatal(a.c.Err, b.c.Err)
	}
	// a holds an array: parsed into Replies; b's integer passes as the leader sent it.
	r := a.c.Replies
	if a.c.Raw != nil || r[0].Int != 41 || r[1].Kind != '*' || r[1].Elems[0].Int != 42 || string(r[1].Elems[1].Str) != "hello world" || string(b.c.Raw) != ":43\r\n" {
		t.Fatalf("replies: %+v %q %q", r, a.c.Raw, b.c.Raw)
	}
}

// TestLoopForwarderLeaderDiesMidPipeline: a leader that answers part of a call and then
// closes fails that call and every call behind it with ErrUnreachable (none gets a reply
// meant for another); the next call dials again and is answered.
func TestLoopForwarderLeaderDiesMidPipeline(t *testing.T) {
	leader, addr, f, m := startLoopRig(t, ForwarderConfig{Timeout: 5 * time.Second})
	a := m.start(f, addr, cmd("INCR", "t"), cmd("INCR", "t"), cmd("INCR", "t"))
	b := m.start(f, addr, cmd("INCR", "t"))
	c := leader.accept(m)
	got := make(chan []string, 1)
	go func() { got <- readRequests(t, c, 4) }()
	m.until(5*time.Second, "the requests", func() bool { return len(got) == 1 })
	<-got
	if _, err := io.WriteString(c, ":1\r\n:2\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	m.until(5*time.Second, "both calls", func() bool { return a.done && b.done })
	if !errors.Is(a.c.Err, ErrUnreachable) || !errors.Is(b.c.Err, ErrUnreachable) {
		t.Fatalf("after the leader closed mid-call: %v, %v; want ErrUnreachable for both", a.c.Err, b.c.Err)
	}
	d := m.start(f, addr, cmd("INCR", "t"))
	c2 := leader.accept(m)
	go func() {
		if _, err := readCommand(c2.br); err == nil {
			_, _ = io.WriteString(c2, ":7\r\n")
		}
	}()
	m.until(5*time.Second, "the call after the redial", func() bool { return d.done })
	if d.c.Err != nil || string(d.c.Raw) != ":7\r\n" {
		t.Fatalf("after the redial: %q %v", d.c.Raw, d.c.Err)
	}
}

// TestLoopForwarderBackpressure: a leader that does not read fills the socket: the rest of
// the requests wait for it to turn writable (the link watches for writable), calls beyond
// MaxPending fail at once, and once the leader reads, every queued request goes out and is
// answered in order.
func TestLoopForwarderBackpressure(t *testing.T) {
	const maxPending = 100000
	leader, addr, f, m := startLoopRig(t, ForwarderConfig{Timeout: 10 * time.Second, MaxPending: maxPending})
	first := m.start(f, addr, cmd("INCR", "t"))
	c := leader.accept(m)
	big := strings.Repeat("x", 60000)
	var calls []*started
	for len(m.writing) == 0 || !anyTrue(m.writing) {
		if len(calls) > 1000 {
			t.Fatal("the socket never filled")
		}
		calls = append(calls, m.start(f, addr, cmd("ECHO", big)))
		m.lf.Tick(time.Now())
	}
	over := m.start(f, addr, manyCmds(maxPending)...)
	if !over.done || !errors.Is(over.c.Err, ErrUnreachable) {
		t.Fatalf("a call beyond MaxPending: done %v, err %v; want ErrUnreachable at once", over.done, over.c.Err)
	}
	// The leader reads and answers now; the loop writes the rest as the socket drains.
	n := len(calls) + 1
	go func() {
		for i := range n {
			args, err := readCommand(c.br)
			if err != nil {
				return
			}
			out := ":0\r\n"
			if i > 0 {
				out = "$" + strconv.Itoa(len(args[1])) + "\r\n" + args[1] + "\r\n"
			}
			if _, err := io.WriteString(c, out); err != nil {
				return
			}
		}
	}()
	m.until(10*time.Second, "every call", func() bool { return calls[len(calls)-1].done })
	if first.c.Err != nil {
		t.Fatal(first.c.Err)
	}
	for i, s := range calls {
		s.c.ParseReplies()
		if s.c.Err != nil || string(s.c.Replies[0].Str) != big {
			t.Fatalf("call %d: %v", i, s.c.Err)
		}
	}
	if anyTrue(m.writing) {
		t.Fatal("still watched for writable with nothing left to write")
	}
}

func anyTrue(m map[int]bool) bool {
	for _, v := range m {
		if v {
			return true
		}
	}
	return false
}

func manyCmds(n int) [][][]byte {
	out := make([][][]byte, n)
	for i := range out {
		out[i] = cmd("INCR", "t")
	}
	return out
}

// TestLoopForwarderUnreachable: a refused connection, a leader that stops answering and one
// that never takes the bytes all fail their calls with ErrUnreachable within the Timeout,
// and Tick's deadline says when the loop must look again.
func TestLoopForwarderUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	const timeout = 300 * time.Millisecond
	f := NewForwarder(ForwarderConfig{Timeout: timeout, Backoff: time.Millisecond})
	defer f.Close()
	m := newManualLoop(t, f)
	s := m.start(f, dead, cmd("INCR", "t"))
	m.until(5*time.Second, "the refused call", func() bool { return s.done })
	if !errors.Is(s.c.Err, ErrUnreachable) {
		t.Fatalf("refused connection: %v", s.c.Err)
	}

	leader := startFakeLeader(t, "")
	addr := leader.ln.Addr().String()
	ok := m.start(f, addr, cmd("INCR", "t"))
	m.until(5*time.Second, "a first call", func() bool { return ok.done })
	if ok.c.Err != nil {
		t.Fatal(ok.c.Err)
	}
	begin := time.Now()
	stalled := m.start(f, addr, cmd("STALL"))
	behind := m.start(f, addr, cmd("STALL")) // the fake leader answers in order: it would answer an INCR
	var due time.Time
	for !stalled.done {
		wait := 10 * time.Millisecond
		if !due.IsZero() {
			wait = max(time.Until(due), 0) + time.Millisecond
		}
		due = m.step(wait)
		if due.IsZero() && !stalled.done {
			t.Fatal("a request outstanding and no deadline from Tick")
		}
		if time.Since(begin) > 5*time.Second {
			t.Fatal("the stalled call did not fail")
		}
	}
	took := time.Since(begin)
	if !errors.Is(stalled.c.Err, ErrUnreachable) || !behind.done || !errors.Is(behind.c.Err, ErrUnreachable) {
		t.Fatalf("stalled: %v; behind it: %v %v", stalled.c.Err, behind.done, behind.c.Err)
	}
	if took < timeout || took > timeout+time.Second {
		t.Fatalf("the stalled call failed after %v, want about %v", took, timeout)
	}
	if due := m.lf.Tick(time.Now()); !due.IsZero() {
		t.Fatalf("nothing outstanding, yet a deadline %v", due)
	}
}

// TestLoopForwarderNoAllocs: a forwarded call costs no allocation in steady state (its
// Start, the write, the read and the match). The leader here allocates nothing either: it
// answers each INCR request (of a fixed length) with a fixed reply.
func TestLoopForwarderNoAllocs(t *testing.T) {
	leader, addr, f, m := startLoopRig(t, ForwarderConfig{Timeout: 5 * time.Second})
	c := f.NewCall()
	done := false
	notify := func() { done = true }
	req := cmd("INCR", "t")
	reqLen := len(appendCommand(nil, req))
	run := func() {
		c.reset()
		c.Add(req)
		c.Add(req)
		c.Notify, done = notify, false
		m.lf.Start(addr, c)
		m.lf.Tick(time.Now())
		for !done {
			m.step(time.Second)
		}
		if c.Err != nil {
			t.Fatal(c.Err)
		}
	}
	first := m.start(f, addr, req)
	lc := leader.accept(m)
	go func() {
		buf := make([]byte, 4096)
		reply := []byte(":1\r\n:1\r\n:1\r\n:1\r\n")
		have := 0
		for {
			n, err := lc.Read(buf)
			if err != nil {
				return
			}
			have += n
			for have >= reqLen {
				k := min(have/reqLen, 4)
				if _, err := lc.Write(reply[:4*k]); err != nil {
					return
				}
				have -= k * reqLen
			}
		}
	}()
	m.until(5*time.Second, "the first call", func() bool { return first.done })
	for range 10 {
		run()
	}
	if a := testing.AllocsPerRun(200, run); a > 0 {
		t.Fatalf("%v allocations per forwarded call, want 0", a)
	}
}

// TestParseReplyParts: every prefix of a buffer of replies parses as incomplete (0, no
// error) until the reply is whole, and then as the whole reply.
func TestParseReplyParts(t *testing.T) {
	replies := []string{":-5\r\n", "$0\r\n\r\n", "*3\r\n+OK\r\n$-1\r\n*1\r\n-ERR x\r\n", "_\r\n", "$5\r\nab\r\nc\r\n"}
	buf := strings.Join(replies, "")
	off := 0
	for i, want := range replies {
		rest := buf[off:]
		for k := 0; k < len(want); k++ {
			var r Reply
			if n, err := parseReply([]byte(rest[:k]), &r, 0); n != 0 || err != nil {
				t.Fatalf("reply %d cut at %d: got %d %v, want incomplete", i, k, n, err)
			}
		}
		var r Reply
		n, err := parseReply([]byte(rest), &r, 0)
		if err != nil || n != len(want) {
			t.Fatalf("reply %d: got %d %v, want %d", i, n, err, len(want))
		}
		off += n
	}
	var r Reply
	if _, err := parseReply([]byte(replies[2]), &r, 0); err != nil || r.Kind != '*' || len(r.Elems) != 3 ||
		string(r.Elems[0].Str) != "OK" || r.Elems[1].Kind != '_' || string(r.Elems[2].Elems[0].Str) != "ERR x" {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := parseReply([]byte(replies[4]), &r, 0); err != nil || string(r.Str) != "ab\r\nc" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{"$2\r\nabcd\r\n", "?x\r\n", ":1\n", "$x\r\n", "*1\r\n:x\r\n"} {
		if _, err := parseReply([]byte(bad), &r, 0); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestLoopForwarderPassThrough: replies the client would get with the same bytes (integers,
// bulk strings, simple strings, errors such as TRYAGAIN) reach Call.Raw as the leader sent
// them, each call's replies back to back, even cut by the reads at every byte and a bulk
// string longer than the read buffer; a call with a reply that a client connection encodes
// its own way (a null, an array, an error with a CR inside) gets Replies instead.
func TestLoopForwarderPassThrough(t *testing.T) {
	leader, addr, f, m := startLoopRig(t, ForwarderConfig{Timeout: 5 * time.Second})
	big := strings.Repeat("x", 200<<10)
	wants := []string{
		":1\r\n$5\r\nhello\r\n+OK\r\n:-2\r\n",
		"-TRYAGAIN ordered tag 't' has no leader now\r\n-UNAVAILABLE x\r\n",
		"$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n",
		"-ERR a\rb\r\n",
		":3\r\n$-1\r\n",
		"*2\r\n:4\r\n:5\r\n",
	}
	counts := []int{4, 2, 1, 1, 2, 1} // the replies in each of wants
	var calls []*started
	for _, n := range counts {
		var reqs [][][]byte
		for range n {
			reqs = append(reqs, cmd("INCR", "t"))
		}
		calls = append(calls, m.start(f, addr, reqs...))
	}
	c := leader.accept(m)
	m.lf.Tick(time.Now())
	got := make(chan []string, 1)
	go func() { got <- readRequests(t, c, 11) }()
	m.until(5*time.Second, "the requests", func() bool { return len(got) == 1 })
	<-got
	all := strings.Join(wants, "")
	// The first call's replies a byte at a time, the rest in parts of 4 KiB.
	end0 := len(wants[0])
	for k := 0; k < len(all); {
		n := 1
		if k >= end0 {
			n = min(4<<10, len(all)-k)
		}
		if _, err := io.WriteString(c, all[k:k+n]); err != nil {
			t.Fatal(err)
		}
		k += n
		if k < end0 {
			r0 := m.readies
			m.until(5*time.Second, "the read of a byte", func() bool { return m.readies > r0 })
			if calls[0].done {
				t.Fatalf("after %d bytes: the first call finished on a partial reply", k)
			}
		}
	}
	m.until(5*time.Second, "every call", func() bool { return calls[len(calls)-1].done })
	for i, s := range calls[:3] {
		if s.c.Err != nil || string(s.c.Raw) != wants[i] {
			t.Fatalf("call %d: Raw %.80q (%v), want %.80q", i, s.c.Raw, s.c.Err, wants[i])
		}
	}
	for i, s := range calls[3:] {
		if s.c.Err != nil || s.c.Raw != nil {
			t.Fatalf("call %d: Raw %q (%v), want Replies", i+3, s.c.Raw, s.c.Err)
		}
	}
	if r := calls[3].c.Replies[0]; r.Kind != '-' || string(r.Str) != "ERR a\rb" {
		t.Fatalf("error with a CR: %+v", r)
	}
	if r := calls[4].c.Replies; r[0].Int != 3 || r[1].Kind != '_' {
		t.Fatalf("integer and null: %+v", r)
	}
	if r := calls[5].c.Replies[0]; r.Kind != '*' || len(r.Elems) != 2 || r.Elems[1].Int != 5 {
		t.Fatalf("array: %+v", r)
	}
	calls[0].c.ParseReplies()
	if r := calls[0].c.Replies; calls[0].c.Raw != nil || r[0].Int != 1 || string(r[1].Str) != "hello" || string(r[2].Str) != "OK" || r[3].Int != -2 {
		t.Fatalf("ParseReplies: %+v", r)
	}
}

// TestScanReplyAgrees: scanReply takes the extent parseReply takes, for every prefix (0 until
// whole) and for malformed replies (an error both).
func TestScanReplyAgrees(t *testing.T) {
	for _, s := range []string{":-5\r\n", "$0\r\n\r\n", "*3\r\n+OK\r\n$-1\r\n*1\r\n-ERR x\r\n", "_\r\n",
		"$5\r\nab\r\nc\r\n", "*-1\r\n", "*0\r\n", "-E\r\n", "$2\r\nabcd\r\n", "?x\r\n", ":1\n", "$x\r\n",
		"*1\r\n:x\r\n", ":\r\n", "\r\n", "$-2\r\n", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"} {
		for k := 0; k <= len(s); k++ {
			var r Reply
			pn, perr := parseReply([]byte(s[:k]), &r, 0)
			sn, _, serr := scanReply([]byte(s[:k]), 0)
			if (perr == nil) != (serr == nil) || (perr == nil && pn != sn) {
				t.Fatalf("%q: parseReply %d %v, scanReply %d %v", s[:k], pn, perr, sn, serr)
			}
		}
	}
}
