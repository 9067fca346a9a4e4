package resp

import (
	"io"
	"strconv"
	"strings"
	"testing"
)

// TestRawCommand: RawCommand gives a multibulk command's own bytes, nil for an inline one
// and for args that are not the connection's parse (a copy); NextRaw the peeked command's
// bytes; WriteRaw appends bytes as they are.
func TestRawCommand(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		addr := startTestServer(t, Config{Model: model}, HandlerFunc(func(c *Conn, args [][]byte) {
			switch strings.ToUpper(string(args[0])) {
			case "RAW":
				writeRawOrNull(c, c.RawCommand(args))
			case "COPY":
				cp := append([][]byte(nil), args...)
				writeRawOrNull(c, c.RawCommand(cp))
			case "JOIN":
				writeRawOrNull(c, c.RawCommand(args))
				if next, n, ok := c.PeekNext(); ok && string(next[0]) == "RAW" {
					writeRawOrNull(c, c.NextRaw(n))
					c.TakeNext(n)
				}
			default:
				c.WriteRaw([]byte("+as is\r\n"))
			}
		}))
		nc, br := dial(t, addr)
		x := "*2\r\n$3\r\nRAW\r\n$1\r\nx\r\n"
		join := "*1\r\n$4\r\nJOIN\r\n"
		y := "*3\r\n$3\r\nRAW\r\n$1\r\ny\r\n$04\r\nzzzz\r\n"
		if _, err := io.WriteString(nc, x+"RAW inline\r\n*1\r\n$4\r\nCOPY\r\n"+join+y+"*1\r\n$1\r\nX\r\n"); err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{x, "<null>", "<null>", join, y, "+as is"} {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			got := strings.TrimSuffix(line, "\r\n")
			if strings.HasPrefix(line, "$") {
				n, _ := strconv.Atoi(got[1:])
				if n < 0 {
					got = "<null>"
				} else {
					b := make([]byte, n+2)
					if _, err := io.ReadFull(br, b); err != nil {
						t.Fatal(err)
					}
					got = string(b[:n])
				}
			}
			if got != want {
				t.Fatalf("reply %d: got %q, want %q", i, got, want)
			}
		}
	})
}

func writeRawOrNull(c *Conn, b []byte) {
	if b == nil {
		c.WriteNull()
		return
	}
	c.WriteBulk(b)
}
