//go:build linux

package resp

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// echoTask is a LoopTask whose "other server" is the far end of a socket pair, served by an
// echo goroutine: "ASK word" suspends its connection and queues word; Tick writes the
// queued words, one a line; Ready reads the lines back and resumes each asker, in order,
// with ResumeOnLoop (the Resumer answers the word). "LATER" suspends until Tick, run by its
// deadline with nothing ready, resumes it.
type echoTask struct {
	l     *Loop
	fd    int // the loop's end
	other int // the echo goroutine's end
	mu    sync.Mutex
	queue []ask // from commands (guarded: see LoopTask)
	// The loop's only.
	inflight []ask
	in       []byte
	later    []*Conn
	laterDue time.Time
	ready    atomic.Int64
	closed   atomic.Bool
}

type ask struct {
	c *Conn
	r *askResumer
}

type askResumer struct{ word string }

func (r *askResumer) Resumed(c *Conn) { c.WriteBulk([]byte(r.word)) }

type taskHandler struct {
	mu   sync.Mutex
	task *echoTask
	t    *testing.T
}

func (h *taskHandler) LoopTask(l *Loop) LoopTask {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	_ = unix.SetNonblock(fds[0], true)
	t := &echoTask{l: l, fd: fds[0], other: fds[1]}
	if err := l.Watch(t.fd, false); err != nil {
		h.t.Fatal(err)
	}
	go func() { // echo every byte back
		buf := make([]byte, 4096)
		for {
			n, err := unix.Read(t.other, buf)
			if n <= 0 || err != nil {
				return
			}
			if _, err := unix.Write(t.other, buf[:n]); err != nil {
				return
			}
		}
	}()
	h.mu.Lock()
	h.task = t
	h.mu.Unlock()
	return t
}

func (h *taskHandler) theTask() *echoTask {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.task
}

func (h *taskHandler) ServeRESP(c *Conn, args [][]byte) {
	switch string(args[0]) {
	case "ASK":
		t := c.LoopTask().(*echoTask)
		r := &askResumer{word: string(args[1])}
		c.Suspend(r)
		t.mu.Lock()
		t.queue = append(t.queue, ask{c, r})
		t.mu.Unlock()
	case "LATER":
		t := c.LoopTask().(*echoTask)
		c.Suspend(&askResumer{word: "LATE"})
		t.later = append(t.later, c)
		t.laterDue = time.Now().Add(50 * time.Millisecond)
	default:
		c.WriteSimple("PONG")
	}
}

func (t *echoTask) Tick(now time.Time) time.Time {
	t.mu.Lock()
	q := t.queue
	t.queue = nil
	t.mu.Unlock()
	var out []byte
	for _, a := range q {
		out = append(out, a.r.word...)
		out = append(out, '\n')
	}
	t.inflight = append(t.inflight, q...)
	if len(out) > 0 {
		if n, err := unix.Write(t.fd, out); err != nil || n != len(out) {
			panic(fmt.Sprintf("echo task write: %d %v", n, err))
		}
	}
	if len(t.later) > 0 && !now.Before(t.laterDue) {
		for _, c := range t.later {
			c.ResumeOnLoop()
		}
		t.later = nil
	}
	if len(t.later) > 0 {
		return t.laterDue
	}
	return time.Time{}
}

func (t *echoTask) Ready(fd int, readable, writable bool, now time.Time) {
	if fd != t.fd || !readable {
		return
	}
	t.ready.Add(1)
	buf := make([]byte, 4096)
	n, err := unix.Read(fd, buf)
	if n <= 0 || err != nil {
		return
	}
	t.in = append(t.in, buf[:n]...)
	for {
		i := bytes.IndexByte(t.in, '\n')
		if i < 0 {
			return
		}
		word := string(t.in[:i])
		t.in = t.in[i+1:]
		a := t.inflight[0]
		t.inflight = t.inflight[1:]
		if a.r.word != word {
			panic("echo task: " + word + " came back for " + a.r.word)
		}
		a.c.ResumeOnLoop()
	}
}

func (t *echoTask) Close() {
	t.closed.Store(true)
	t.l.Unwatch(t.fd)
	_ = unix.Close(t.fd)
	_ = unix.Close(t.other)
}

// TestLoopTaskResumesOnLoop: connections whose commands wait on a loop task get their
// answers in their order, each its own (the words come back in the order written, FIFO, and
// each connection's replies are checked against its own words), with every PING behind a
// suspended command held until its answer; the answers come in by the loop's own epoll set
// and resume on the loop: no eventfd wake during the traffic. When the loop stops, the task
// is closed.
func TestLoopTaskResumesOnLoop(t *testing.T) {
	h := &taskHandler{t: t}
	var wakes atomic.Int64
	t.Cleanup(func() { // runs after the server's Shutdown (cleanups run last first)
		if !h.theTask().closed.Load() {
			t.Error("the loop stopped without closing its task")
		}
	})
	_, addr := startHookedServer(t, Config{}, h, &loopHooks{ackWake: func(*loop) { wakes.Add(1) }})
	const clients, depth = 8, 20
	type client struct {
		w interface{ Write([]byte) (int, error) }
		r interface{ ReadString(byte) (string, error) }
	}
	cs := make([]client, clients)
	for i := range cs {
		nc, br := dial(t, addr)
		fmt.Fprint(nc, "PING\r\n")
		if line, err := br.ReadString('\n'); line != "+PONG\r\n" {
			t.Fatalf("client %d: %q %v", i, line, err)
		}
		cs[i] = client{nc, br}
	}
	wakes.Store(0)
	for i, c := range cs {
		var b strings.Builder
		for j := range depth {
			fmt.Fprintf(&b, "ASK c%d-%d\r\nPING\r\n", i, j)
		}
		if _, err := c.w.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cs {
		for j := range depth {
			want := fmt.Sprintf("c%d-%d", i, j)
			line, err := c.r.ReadString('\n')
			if err != nil || line != fmt.Sprintf("$%d\r\n", len(want)) {
				t.Fatalf("client %d reply %d: %q %v, want the bulk %q", i, j, line, err, want)
			}
			if line, _ := c.r.ReadString('\n'); line != want+"\r\n" {
				t.Fatalf("client %d reply %d: got %q, want %q (an answer for another command or connection)", i, j, line, want)
			}
			if line, _ := c.r.ReadString('\n'); line != "+PONG\r\n" {
				t.Fatalf("client %d: after answer %d: %q, want the PING's reply", i, j, line)
			}
		}
	}
	if n := wakes.Load(); n != 0 {
		t.Fatalf("%d eventfd wakes while the answers came in, want 0 (resumed on the loop)", n)
	}
	if h.theTask().ready.Load() == 0 {
		t.Fatal("no Ready call")
	}
}

// TestLoopTaskDeadline: Tick's deadline ends the loop's wait for its sockets: a command the
// task resumes from Tick, with no socket ready, is answered about then, not at the sweep
// interval (a second here).
func TestLoopTaskDeadline(t *testing.T) {
	h := &taskHandler{t: t}
	_, addr := startLoopServer(t, Config{}, h)
	nc, br := dial(t, addr)
	fmt.Fprint(nc, "PING\r\n")
	if line, _ := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatal(line)
	}
	start := time.Now()
	fmt.Fprint(nc, "LATER\r\nPING\r\n")
	var got strings.Builder
	for range 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%q %v", got.String(), err)
		}
		got.WriteString(line)
	}
	took := time.Since(start)
	if got.String() != "$4\r\nLATE\r\n+PONG\r\n" {
		t.Fatalf("got %q", got.String())
	}
	if took < 50*time.Millisecond || took > 700*time.Millisecond {
		t.Fatalf("answered after %v, want about 50ms (Tick's deadline), well before the 1s sweep", took)
	}
}
