//go:build linux

package resp

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/testkit"
)

// suspendHandler: "ASYNC name" suspends its connection until the test calls resume(name);
// "NOW" suspends and resumes within the command (before it returns); "GO" suspends and
// resumes from another goroutine at once (racing the command's return); "CAN" (and "CANOFF",
// which MayBlock sends off the loop) answers whether the command may suspend. The Resumer
// answers "+DONE"; anything else answers PONG.
type suspendHandler struct {
	mu      sync.Mutex
	waiting map[string]*Conn
	started chan string
}

type doneResumer struct{}

func (doneResumer) Resumed(c *Conn) { c.WriteSimple("DONE") }

func (h *suspendHandler) ServeRESP(c *Conn, args [][]byte) {
	switch cmd := string(args[0]); cmd {
	case "ASYNC":
		c.Suspend(doneResumer{})
		h.mu.Lock()
		h.waiting[string(args[1])] = c
		h.mu.Unlock()
		h.started <- string(args[1])
	case "NOW":
		c.Suspend(doneResumer{})
		c.Resume()
	case "GO":
		c.Suspend(doneResumer{})
		go c.Resume()
	case "CAN", "CANOFF":
		if c.CanSuspend() {
			c.WriteInt(1)
		} else {
			c.WriteInt(0)
		}
	default:
		c.WriteSimple("PONG")
	}
}

func (h *suspendHandler) MayBlock(c *Conn, args [][]byte) bool { return string(args[0]) == "CANOFF" }

func (h *suspendHandler) resume(t *testing.T, name string) {
	t.Helper()
	h.mu.Lock()
	c := h.waiting[name]
	delete(h.waiting, name)
	h.mu.Unlock()
	if c == nil {
		t.Fatalf("no connection suspended as %q", name)
	}
	c.Resume()
}

func newSuspendHandler() *suspendHandler {
	return &suspendHandler{waiting: map[string]*Conn{}, started: make(chan string, 16)}
}

// TestSuspendHoldsPipeline: while a command is suspended its connection runs nothing else
// (the PING after it is answered only after its reply), the loop serves the other
// connections, and the replies written before it go out at once. Fails when the loop goes on
// with the connection after a suspension (PONG before DONE), or does not write the earlier
// replies before it lets the connection wait.
func TestSuspendHoldsPipeline(t *testing.T) {
	h := newSuspendHandler()
	_, addr := startLoopServer(t, Config{}, h)
	a, ar := dial(t, addr)
	fmt.Fprint(a, "PING\r\nASYNC a\r\nPING\r\n")
	<-h.started
	t.Cleanup(func() { // a failed check leaves it suspended: Shutdown would wait for it
		h.mu.Lock()
		c := h.waiting["a"]
		h.mu.Unlock()
		if c != nil {
			c.Resume()
		}
	})
	_ = a.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, err := ar.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("reply of the command before the suspended one, while it waits: %q, %v", line, err)
	}
	b, br := dial(t, addr)
	fmt.Fprint(b, "PING\r\n")
	if line, err := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("another connection while one is suspended: %q, %v", line, err)
	}
	// Nothing more for a while: the PING behind the suspended command waits.
	_ = a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if line, err := ar.ReadString('\n'); err == nil {
		t.Fatalf("a reply while the command is suspended: %q", line)
	}
	h.resume(t, "a")
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got strings.Builder
	for range 2 {
		line, err := ar.ReadString('\n')
		if err != nil {
			t.Fatalf("after Resume: %q, %v", got.String(), err)
		}
		got.WriteString(line)
	}
	if got.String() != "+DONE\r\n+PONG\r\n" {
		t.Fatalf("after Resume: %q, want the suspended reply, then the next command's", got.String())
	}
}

// TestSuspendResumedEarly: a Resume that comes before the suspended command has returned
// (within it, or racing it from another goroutine) finishes the command on the loop at once
// and the pipeline goes on, replies in order. Fails (the connection hangs) when the loop
// parks a connection already resumed.
func TestSuspendResumedEarly(t *testing.T) {
	h := newSuspendHandler()
	_, addr := startLoopServer(t, Config{}, h)
	a, ar := dial(t, addr)
	const n = 2000
	var req, want strings.Builder
	for i := range n {
		cmd := "NOW"
		if i%2 == 1 {
			cmd = "GO"
		}
		req.WriteString(cmd + "\r\nPING\r\n")
		want.WriteString("+DONE\r\n+PONG\r\n")
	}
	go func() { _, _ = io.WriteString(a, req.String()) }()
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(ar, got); err != nil {
		t.Fatalf("replies of %d early-resumed commands: %v (%d bytes in)", n, err, len(got))
	}
	if string(got) != want.String() {
		t.Fatal("replies of early-resumed commands out of order")
	}
}

// TestCanSuspend: only a command run on the loop goroutine may suspend; one the Handler
// sends off the loop (MayBlock) and any on the goroutine model may not.
func TestCanSuspend(t *testing.T) {
	h := newSuspendHandler()
	_, addr := startLoopServer(t, Config{}, h)
	a, ar := dial(t, addr)
	fmt.Fprint(a, "CAN\r\nCANOFF\r\nCAN\r\n")
	var got strings.Builder
	for range 3 {
		line, err := ar.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(line)
	}
	if got.String() != ":1\r\n:0\r\n:1\r\n" {
		t.Fatalf("CanSuspend on the loop, off it, on it: %q", got.String())
	}
	srv, err := NewServer(Config{Model: ModelGoroutine}, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	gaddr, stop := testkit.ServeLocal(t, srv)
	defer stop()
	g, gr := dial(t, gaddr)
	fmt.Fprint(g, "CAN\r\n")
	if line, err := gr.ReadString('\n'); line != ":0\r\n" {
		t.Fatalf("CanSuspend on the goroutine model: %q, %v", line, err)
	}
}
