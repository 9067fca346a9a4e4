package ordered

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeLeader is a RESP server for the Forwarder: INCR answers a counter shared by all its
// connections, STALL never answers, AUTH wants pass.
type fakeLeader struct {
	ln    net.Listener
	pass  string
	n     atomic.Int64
	conns atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  []net.Conn
}

func startFakeLeader(t *testing.T, pass string) *fakeLeader {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLeader{ln: ln, pass: pass}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			f.mu.Lock()
			f.open = append(f.open, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go f.serve(c)
		}
	}()
	t.Cleanup(f.close)
	return f
}

func (f *fakeLeader) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for _, c := range f.open {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fakeLeader) serve(c net.Conn) {
	defer f.wg.Done()
	br := bufio.NewReader(c)
	authed := f.pass == ""
	for {
		args, err := readCommand(br)
		if err != nil {
			return
		}
		var out string
		switch strings.ToUpper(args[0]) {
		case "AUTH":
			if args[1] == f.pass {
				authed = true
				out = "+OK\r\n"
			} else {
				out = "-WRONGPASS invalid password\r\n"
			}
		case "CLIENT":
			out = "+OK\r\n"
		case "STALL":
			continue
		case "INCR":
			if !authed {
				out = "-NOAUTH Authentication required.\r\n"
				break
			}
			out = ":" + strconv.FormatInt(f.n.Add(1), 10) + "\r\n"
		case "ECHO":
			out = "$" + strconv.Itoa(len(args[1])) + "\r\n" + args[1] + "\r\n"
		case "SEG":
			out = "*2\r\n:" + strconv.FormatInt(f.n.Add(1), 10) + "\r\n$3\r\nabc\r\n"
		default:
			out = "-ERR unknown\r\n"
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

func readCommand(br *bufio.Reader) ([]string, error) {
	var r Reply
	if err := readReply(br, &r, 0); err != nil {
		return nil, err
	}
	if r.Kind != '*' || len(r.Elems) == 0 {
		return nil, errors.New("not a command")
	}
	args := make([]string, len(r.Elems))
	for i, e := range r.Elems {
		args[i] = string(e.Str)
	}
	return args, nil
}

func cmd(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// TestForwarderPipelinesInOrder: many callers at once share the Forwarder's few connections
// and each gets its own reply: the replies of one caller are increasing (its requests went
// out in its order), and no reply is given to two callers (FIFO matching).
func TestForwarderPipelinesInOrder(t *testing.T) {
	leader := startFakeLeader(t, "pw")
	f := NewForwarder(ForwarderConfig{Password: "pw", Conns: 2, Timeout: 5 * time.Second})
	defer f.Close()
	const callers, each = 32, 200
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for range each {
				c := f.Do(leader.ln.Addr().String(), cmd("INCR", "t"))
				if c.Err != nil || c.Replies[0].Kind != ':' || c.Replies[0].Int <= last {
					errs <- errors.New("reply " + strconv.FormatInt(c.Replies[0].Int, 10) + " after " + strconv.FormatInt(last, 10) + ": " + errString(c.Err))
					f.Release(c)
					return
				}
				last = c.Replies[0].Int
				mu.Lock()
				dup := seen[last]
				seen[last] = true
				mu.Unlock()
				f.Release(c)
				if dup {
					errs <- errors.New("a reply delivered twice: " + strconv.FormatInt(last, 10))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != callers*each {
		t.Fatalf("got %d replies, want %d", len(seen), callers*each)
	}
	if n := leader.conns.Load(); n > 2 {
		t.Fatalf("%d connections to the leader, want at most 2 (Conns)", n)
	}
	c := f.Do(leader.ln.Addr().String(), cmd("SEG"))
	if c.Err != nil || c.Replies[0].Kind != '*' || len(c.Replies[0].Elems) != 2 || string(c.Replies[0].Elems[1].Str) != "abc" {
		t.Fatalf("array reply: %+v %v", c.Replies, c.Err)
	}
	f.Release(c)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestForwarderUnreachable: a leader that refuses connections, one that stops answering (the
// oldest reply waits past Timeout), and a wrong password all fail the request with
// ErrUnreachable, never a reply.
func TestForwarderUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	f := NewForwarder(ForwarderConfig{Timeout: 300 * time.Millisecond, Backoff: time.Millisecond})
	defer f.Close()
	if c := f.Do(dead, cmd("INCR", "t")); !errors.Is(c.Err, ErrUnreachable) {
		t.Fatalf("refused connection: %+v %v", c.Replies, c.Err)
	}

	leader := startFakeLeader(t, "")
	addr := leader.ln.Addr().String()
	start := time.Now()
	var wg sync.WaitGroup
	var stalled atomic.Int64
	for range 4 { // the stalled request and those behind it on the connection all fail
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := f.Do(addr, cmd("STALL"))
			if errors.Is(c.Err, ErrUnreachable) {
				stalled.Add(1)
			}
		}()
	}
	wg.Wait()
	if stalled.Load() != 4 || time.Since(start) > 5*time.Second {
		t.Fatalf("%d of 4 stalled requests failed (after %v)", stalled.Load(), time.Since(start))
	}
	// The connection is dialed again afterwards.
	if c := f.Do(addr, cmd("INCR", "t")); c.Err != nil || c.Replies[0].Kind != ':' {
		t.Fatalf("after the stall: %+v %v", c.Replies, c.Err)
	}

	locked := startFakeLeader(t, "right")
	fw := NewForwarder(ForwarderConfig{Password: "wrong", Timeout: time.Second})
	defer fw.Close()
	if c := fw.Do(locked.ln.Addr().String(), cmd("INCR", "t")); !errors.Is(c.Err, ErrUnreachable) {
		t.Fatalf("wrong password: %+v %v", c.Replies, c.Err)
	}
}

// TestForwarderCallOneWrite: a call of many requests (a client's pipeline) goes out in one
// write on one connection and gets its replies in its order; a stalled one fails every
// request of the call, and the calls queued behind it, with ErrUnreachable.
func TestForwarderCallOneWrite(t *testing.T) {
	leader := startFakeLeader(t, "")
	addr := leader.ln.Addr().String()
	f := NewForwarder(ForwarderConfig{Conns: 2, Timeout: 300 * time.Millisecond, Backoff: time.Millisecond})
	defer f.Close()
	if c := f.Do(addr, cmd("INCR", "t")); c.Err != nil { // dial first
		t.Fatal(c.Err)
	}
	const n = 100
	for round := range 3 {
		w0, r0 := f.Writes(), f.Requests()
		c := f.NewCall()
		for i := range n {
			if i%10 == 9 {
				c.Add(cmd("SEG"))
			} else {
				c.Add(cmd("INCR", "t"))
			}
		}
		f.Run(addr, c)
		if c.Err != nil || len(c.Replies) != n {
			t.Fatalf("round %d: %d replies, err %v", round, len(c.Replies), c.Err)
		}
		last := int64(0)
		for i, r := range c.Replies {
			v, kind := r.Int, r.Kind
			if i%10 == 9 {
				if kind != '*' || len(r.Elems) != 2 || string(r.Elems[1].Str) != "abc" {
					t.Fatalf("round %d: reply %d: got %+v, want the SEG array", round, i, r)
				}
				v = r.Elems[0].Int
			} else if kind != ':' {
				t.Fatalf("round %d: reply %d: got %+v, want an integer", round, i, r)
			}
			if v != last+1 && last != 0 {
				t.Fatalf("round %d: reply %d is %d after %d: the call's requests ran out of order", round, i, v, last)
			}
			last = v
		}
		if w, r := f.Writes()-w0, f.Requests()-r0; w != 1 || r != n {
			t.Fatalf("round %d: %d requests in %d writes, want %d in 1", round, r, w, n)
		}
		f.Release(c)
	}

	c := f.NewCall()
	c.Add(cmd("INCR", "t"))
	c.Add(cmd("STALL"))
	c.Add(cmd("INCR", "t"))
	f.Run(addr, c)
	if !errors.Is(c.Err, ErrUnreachable) {
		t.Fatalf("stalled call: got %v, want ErrUnreachable", c.Err)
	}
	f.Release(c)
	if c := f.Do(addr, cmd("INCR", "t")); c.Err != nil || c.Replies[0].Kind != ':' {
		t.Fatalf("after the stall: %+v %v", c.Replies, c.Err)
	}
}

// TestParseReplyInt: RESP integers as strconv reads them, the bounds included; anything
// else is an error.
func TestParseReplyInt(t *testing.T) {
	for _, s := range []string{"0", "7", "-1", "1001", "9223372036854775807", "-9223372036854775808"} {
		want, _ := strconv.ParseInt(s, 10, 64)
		if got, err := parseReplyInt([]byte(s)); err != nil || got != want {
			t.Errorf("%q: got %d %v, want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-", "+1", "1x", "9223372036854775808", "-9223372036854775809", "99999999999999999999", " 1"} {
		if got, err := parseReplyInt([]byte(s)); err == nil {
			t.Errorf("%q: got %d, want an error", s, got)
		}
	}
}
