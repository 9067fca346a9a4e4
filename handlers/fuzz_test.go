package handlers

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/resp"
)

// FuzzServe sends arbitrary bytes to a real server and checks its invariants: it never
// crashes or hangs, every reply is well-formed RESP, and there is exactly one reply per
// command it parsed (plus one error reply when it closes on a protocol error).
func FuzzServe(f *testing.F) {
	seeds := []string{
		"PING\r\n",
		"*2\r\n$4\r\nINCR\r\n$5\r\norder\r\n",
		"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n",
		"HELLO 3\r\nIDS.SNOWFLAKE 3\r\nIDS.DECODE 1\r\nCLIENT INFO\r\nINFO\r\n",
		"*1\r\n$9223372036854775807\r\nab",
		"*3000000000\r\n",
		"*20k\r\n",
		"*1\r\n$-10\r\n",
		"*1\r\n$blabla\r\n",
		"*1\r\nfoo\r\n",
		"COMMAND DOCS\r\nCOMMAND\r\nCONFIG GET *\r\nTIME\r\nRESET\r\n",
		"INCRBY a 99999999999999999999\r\nIDS.SEGMENT a 0\r\nIDS.CREATE\r\nQUIT\r\nPING\r\n",
		"CLIENT SETNAME x\r\nCLIENT GETNAME\r\nSELECT 1\r\nAUTH a b c\r\n",
		"MULTI\r\nINCR a\r\nIDS.SEGMENT a 2\r\nMULTI\r\nFOO\r\nEXEC\r\nEXEC\r\nDISCARD\r\nWATCH a\r\nUNWATCH\r\n",
		"MULTI\r\nHELLO 3\r\nIDS.DECODE 1\r\nQUIT\r\nEXEC\r\n",
		"CLIENT TRACKING on BCAST PREFIX a PREFIX ab\r\nCLIENT TRACKING on OPTIN\r\nCLIENT CACHING yes\r\nCLIENT TRACKINGINFO\r\nCLIENT GETREDIR\r\nCLIENT NO-EVICT on\r\nRESET\r\n",
		"ECHO \"a\\x41 b\"\r\nECHO 'it\\'s'\r\nINCR \"foo\r\nPING\r\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	s := startServer(f, serverOpts{})
	f.Fuzz(func(t *testing.T, in []byte) {
		want := expectedReplies(in)
		conn, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			_, _ = conn.Write(in)
			_ = conn.(*net.TCPConn).CloseWrite()
		}()
		r := bufio.NewReader(conn)
		got := 0
		for {
			err := readReply(r)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reply %d malformed: %v (input %q)", got, err, in)
			}
			got++
		}
		if got != want {
			t.Fatalf("got %d replies, want %d (input %q)", got, want, in)
		}
	})
}

// expectedReplies counts the replies the server owes for in: one per command up to and
// including QUIT, plus one for a protocol error.
func expectedReplies(in []byte) int {
	p := resp.NewParser(resp.Limits{})
	n := 0
	for len(in) > 0 {
		args, used, err := p.Next(in, true)
		if err != nil {
			return n + 1
		}
		if used == 0 {
			return n
		}
		in = in[used:]
		if len(args) == 0 {
			continue
		}
		n++
		if strings.EqualFold(string(args[0]), "quit") {
			return n
		}
	}
	return n
}

// readReply reads one RESP2/RESP3 reply, checking its framing.
func readReply(r *bufio.Reader) error {
	line, err := r.ReadString('\n')
	if err != nil {
		if err == io.EOF && line == "" {
			return io.EOF
		}
		return fmt.Errorf("truncated line %q: %w", line, err)
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("bad line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	case '$', '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad length %q", body)
		}
		if n < 0 {
			return nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("truncated bulk: %w", err)
		}
		if string(b[n:]) != "\r\n" {
			return fmt.Errorf("bulk without CRLF")
		}
		return nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad count %q", body)
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			if err := readReply(r); err != nil {
				if errors.Is(err, io.EOF) {
					return fmt.Errorf("aggregate cut short")
				}
				return err
			}
		}
		if line[0] == '|' { // an attribute precedes the real reply
			return readReply(r)
		}
		return nil
	}
	return fmt.Errorf("unknown reply type %q", line)
}
