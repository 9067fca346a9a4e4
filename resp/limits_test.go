package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestParserArgCap: more arguments than MaxMultibulk (1024 by default) is Redis's
// "invalid multibulk length", for multibulk and inline commands alike; 1024 pass.
func TestParserArgCap(t *testing.T) {
	multibulk := func(n int) []byte {
		var b bytes.Buffer
		fmt.Fprintf(&b, "*%d\r\n", n)
		for i := 0; i < n; i++ {
			b.WriteString("$1\r\na\r\n")
		}
		return b.Bytes()
	}
	p := NewParser(Limits{})
	if args, _, err := p.Next(multibulk(DefaultMaxArgs), true); err != nil || len(args) != DefaultMaxArgs {
		t.Fatalf("%d args: got %d, %v", DefaultMaxArgs, len(args), err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"multibulk", multibulk(DefaultMaxArgs + 1), "invalid multibulk length"},
		{"header alone", []byte("*690000\r\n"), "invalid multibulk length"},
		{"inline", []byte(strings.Repeat("a ", DefaultMaxArgs+1) + "\r\n"), "too big inline request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := NewParser(Limits{}).Next(tc.in, true)
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.msg != tc.want {
				t.Errorf("got %v, want protocol error %q", err, tc.want)
			}
		})
	}
	if args, _, err := NewParser(Limits{}).Next([]byte(strings.Repeat("a ", DefaultMaxArgs)+"\r\n"), true); err != nil || len(args) != DefaultMaxArgs {
		t.Errorf("inline %d args: got %d, %v", DefaultMaxArgs, len(args), err)
	}
}

// TestParserReleaseAfterCommand: with a raised cap, the tables of a huge command are given
// back by Release, which the connection calls as soon as the command has run.
func TestParserReleaseAfterCommand(t *testing.T) {
	p := parsedBigCommand(t, 100000)
	p.Release()
	if cap(p.args) > maxKeptArgs || cap(p.offs) > 2*maxKeptArgs {
		t.Errorf("after Release the parser holds room for %d args and %d offsets", cap(p.args), cap(p.offs))
	}
	if got := MaxArgTables(Limits{}); got != 80*1024 {
		t.Errorf("MaxArgTables: got %d, want 80 KiB", got)
	}
}

// TestInlinePreAuthLimit: before AUTH an inline line is held to the unauthenticated bulk
// limit (16 KiB), after it to 64 KiB.
func TestInlinePreAuthLimit(t *testing.T) {
	line := []byte("PING " + strings.Repeat("a", 20*1024) + "\r\n")
	_, _, err := NewParser(Limits{}).Next(line, false)
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.msg != "too big inline request" {
		t.Errorf("20 KiB inline before AUTH: got %v, want too big inline request", err)
	}
	// Unterminated: cut as soon as the buffer passes 16 KiB.
	_, _, err = NewParser(Limits{}).Next(line[:17*1024], false)
	if !errors.As(err, &pe) || pe.msg != "too big inline request" {
		t.Errorf("17 KiB unterminated inline before AUTH: got %v, want too big inline request", err)
	}
	if args, _, err := NewParser(Limits{}).Next(line, true); err != nil || len(args) != 2 {
		t.Errorf("20 KiB inline after AUTH: got %d args, %v", len(args), err)
	}
}

// TestOutputLimit: a reply larger than MaxOutputBuffer closes the client with nothing sent
// and is counted; many small pipelined replies adding up to far more do not.
func TestOutputLimit(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		const limit = 4096
		var srv atomic.Pointer[Server]
		h := HandlerFunc(func(c *Conn, args [][]byte) {
			switch string(args[0]) {
			case "BIG":
				c.WriteBulkString(strings.Repeat("x", limit+1))
			default:
				c.WriteBulkString(strings.Repeat("y", 100))
			}
			srv.Store(c.Server())
		})
		addr := startTestServer(t, Config{MaxOutputBuffer: limit, Model: model}, h)
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		const small = 200 // 200 × 107 bytes: five times the limit, in one pipeline
		fmt.Fprint(nc, strings.Repeat("SMALL\r\n", small))
		r := bufio.NewReader(nc)
		for i := 0; i < small; i++ {
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatalf("small reply %d: %v", i, err)
			}
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatalf("small reply %d: %v", i, err)
			}
		}
		fmt.Fprint(nc, "BIG\r\n")
		if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
			t.Errorf("after an over-limit reply: got %d bytes, %v; want a closed connection", len(rest), err)
		}
		if got := srv.Load().Stats().OutputLimitClosed; got != 1 {
			t.Errorf("OutputLimitClosed: got %d, want 1", got)
		}
	})
}
