package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func startTestServer(t *testing.T, cfg Config, h Handler) string {
	t.Helper()
	srv, err := NewServer(cfg, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return addr.String()
}

// TestPanicCostsOneConnection: a panicking command closes its connection; the server and
// its other clients go on.
func TestPanicCostsOneConnection(t *testing.T) {
	addr := startTestServer(t, Config{}, HandlerFunc(func(c *Conn, args [][]byte) {
		if string(args[0]) == "BOOM" {
			panic("boom")
		}
		c.WriteSimple("PONG")
	}))
	other, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	bad, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_ = bad.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(bad, "BOOM\r\n")
	if got, _ := io.ReadAll(bad); len(got) != 0 {
		t.Errorf("panicking command: got %q, want a closed connection", got)
	}
	_ = other.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(other, "PING\r\n")
	if line, err := bufio.NewReader(other).ReadString('\n'); line != "+PONG\r\n" {
		t.Errorf("other client after the panic: got %q, %v; want +PONG", line, err)
	}
}

// TestShutdownDeliversInFlightReplies: a command running when Shutdown starts still gets its
// reply before the connection closes.
func TestShutdownDeliversInFlightReplies(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	srv, err := NewServer(Config{}, HandlerFunc(func(c *Conn, args [][]byte) {
		close(started)
		<-release
		c.WriteSimple("DONE")
	}), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	conn, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(conn, "SLOW\r\n")
	<-started
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // Shutdown is now waiting for the command
	close(release)
	got, _ := io.ReadAll(conn)
	if string(got) != "+DONE\r\n" {
		t.Errorf("got %q, want the in-flight reply then close", got)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		t.Errorf("server still accepts after Shutdown")
	}
}
