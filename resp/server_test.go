package resp

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// listenServer makes a server of cfg and h listening on 127.0.0.1:0, not yet serving, for
// the tests whose subject is its Serve and Shutdown.
func listenServer(t *testing.T, cfg Config, h Handler) (*Server, net.Addr) {
	t.Helper()
	srv, err := NewServer(cfg, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, addr
}

func startTestServer(t *testing.T, cfg Config, h Handler) string {
	t.Helper()
	srv, addr := listenServer(t, cfg, h)
	testkit.Serve(t, srv)
	return addr.String()
}

// TestPanicCostsOneConnection: a panicking command closes its connection; the server and
// its other clients go on.
func TestPanicCostsOneConnection(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		addr := startTestServer(t, Config{Model: model}, HandlerFunc(func(c *Conn, args [][]byte) {
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
	})
}

// TestShutdownDeliversInFlightReplies: a command running when Shutdown starts still gets its
// reply before the connection closes.
func TestShutdownDeliversInFlightReplies(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		started := make(chan struct{})
		release := make(chan struct{})
		srv, addr := listenServer(t, Config{Model: model}, HandlerFunc(func(c *Conn, args [][]byte) {
			close(started)
			<-release
			c.WriteSimple("DONE")
		}))
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
	})
}

// selfSigned returns a throwaway certificate for 127.0.0.1.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

var pong = HandlerFunc(func(c *Conn, args [][]byte) { c.WriteSimple("PONG") })

// TestMaxClientsTLSSilentClient: with TLS and every slot taken, a client that connects and
// never starts its handshake must not stop the server from accepting the next client once a
// slot is free (the max-clients reply is written over TLS, which first reads a ClientHello).
func TestMaxClientsTLSSilentClient(t *testing.T) {
	cert := selfSigned(t)
	addr := startTestServer(t, Config{MaxClients: 1, TLS: &tls.Config{Certificates: []tls.Certificate{cert}}}, pong)
	ccfg := &tls.Config{InsecureSkipVerify: true}
	ping := func() (string, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, ccfg)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		fmt.Fprint(c, "PING\r\n")
		return bufio.NewReader(c).ReadString('\n')
	}
	first, err := tls.Dial("tcp", addr, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = first.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(first, "PING\r\n")
	if line, err := bufio.NewReader(first).ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("first client: got %q, %v", line, err)
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	time.Sleep(100 * time.Millisecond) // the server accepts it and rejects it: no slot
	first.Close()
	var line string
	if !testkit.Poll(4*time.Second, func() bool {
		line, err = ping()
		return line == "+PONG\r\n"
	}) {
		t.Fatalf("no client served after a slot freed up: last got %q, %v", line, err)
	}
}

// TestShutdownTimeoutStopsPipeline: when Shutdown's context ends, a connection with many slow
// commands still buffered stops running them; Shutdown returns soon after, not after the
// whole pipeline.
func TestShutdownTimeoutStopsPipeline(t *testing.T) {
	testShutdownTimeout(t, 100*time.Millisecond, 100, 2*time.Second) // e.g. a bounded wait for a segment
}

// TestShutdownTimeoutStopsShortCommands: the same with commands shorter than the event
// loop's watchdog period, which stay on the loop goroutine: the loop itself must stop.
func TestShutdownTimeoutStopsShortCommands(t *testing.T) {
	testShutdownTimeout(t, 2*time.Millisecond, 5000, 3*time.Second)
}

// testShutdownTimeout buffers n commands of work each (10 s in all) on one connection and
// shuts the server down with a 200 ms context once the first has started: Shutdown must
// report its deadline and return within limit.
func testShutdownTimeout(t *testing.T, work time.Duration, n int, limit time.Duration) {
	eachModel(t, func(t *testing.T, model string) {
		started := make(chan struct{}, 1)
		srv, addr := listenServer(t, Config{Model: model}, HandlerFunc(func(c *Conn, args [][]byte) {
			select {
			case started <- struct{}{}:
			default:
			}
			time.Sleep(work)
			c.WriteSimple("OK")
		}))
		go func() { _ = srv.Serve() }()
		conn, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, strings.Repeat("SLOW\r\n", n))
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: got %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d > limit {
			t.Errorf("Shutdown took %v after its context ended at 200ms", d)
		}
	})
}

// TestSubSecondTimeouts: an idle timeout below the deadline re-arming interval (one second)
// must still let an active client go on.
func TestSubSecondTimeouts(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		addr := startTestServer(t, Config{IdleTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, Model: model}, pong)
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(conn)
		for i := 0; i < 15; i++ { // 1.5 s, a request every 100 ms
			fmt.Fprint(conn, "PING\r\n")
			if line, err := r.ReadString('\n'); line != "+PONG\r\n" {
				t.Fatalf("request %d at %v: got %q, %v; want +PONG", i, time.Duration(i)*100*time.Millisecond, line, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestSplitPipelineCompaction: a pipeline of commands of many sizes, written in chunks that
// cut commands anywhere, so partial commands sit at the end of the buffer when it is compacted
// and grown; every reply must come back intact and in order.
func TestSplitPipelineCompaction(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		echo := HandlerFunc(func(c *Conn, args [][]byte) { c.WriteBulk(args[len(args)-1]) })
		addr := startTestServer(t, Config{Model: model}, echo)
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		var req, want strings.Builder
		for i := 0; i < 2000; i++ {
			arg := strings.Repeat(string(rune('a'+i%26)), (i*7919)%40000)
			if i%3 == 0 {
				fmt.Fprintf(&req, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(arg), arg)
			} else {
				fmt.Fprintf(&req, "*3\r\n$1\r\nX\r\n$1\r\ny\r\n$%d\r\n%s\r\n", len(arg), arg)
			}
			fmt.Fprintf(&want, "$%d\r\n%s\r\n", len(arg), arg)
		}
		go func() {
			b := []byte(req.String())
			for i, step := 0, 1; i < len(b); step = step*31%16381 + 1 {
				j := min(i+step, len(b))
				if _, err := conn.Write(b[i:j]); err != nil {
					return
				}
				i = j
			}
		}()
		got := make([]byte, want.Len())
		if _, err := io.ReadFull(conn, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != want.String() {
			t.Fatal("replies differ from the arguments sent")
		}
	})
}

// TestSlowBatchReplies: a pipeline whose commands together take longer than the write timeout
// (each one waiting, say, for a segment during a store outage) still gets its replies: the
// write deadline counts from the write, not from the start of the batch.
func TestSlowBatchReplies(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		slow := HandlerFunc(func(c *Conn, args [][]byte) {
			time.Sleep(100 * time.Millisecond)
			c.WriteSimple("OK")
		})
		addr := startTestServer(t, Config{WriteTimeout: 500 * time.Millisecond, Model: model}, slow)
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(conn, strings.Repeat("SLOW\r\n", 10)) // one batch of about 1 s
		want := strings.Repeat("+OK\r\n", 10)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
			t.Errorf("got %q, %v; want 10 OK replies", got, err)
		}
	})
}

// eachModel runs a test against every server model this binary has.
func eachModel(t *testing.T, f func(t *testing.T, model string)) {
	models := []string{ModelGoroutine, ModelEventLoop}
	for _, m := range models {
		t.Run(m, func(t *testing.T) { f(t, m) })
	}
}
