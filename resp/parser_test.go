package resp

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParserCommands(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want [][]string // commands; nil entries are "no command" (*0, empty line)
		rest int        // bytes left unparsed
	}{
		{name: "multibulk", in: "*2\r\n$4\r\nINCR\r\n$5\r\norder\r\n", want: [][]string{{"INCR", "order"}}},
		{name: "pipelined", in: "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n", want: [][]string{{"PING"}, {"ECHO", "hi"}}},
		{name: "inline", in: "PING\r\nincr  a\n", want: [][]string{{"PING"}, {"incr", "a"}}},
		{name: "empty bulk", in: "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", want: [][]string{{"ECHO", ""}}},
		{name: "star zero ignored", in: "*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", want: [][]string{nil, nil, {"PING"}}},
		{name: "partial header", in: "*2\r\n$4\r\nINCR\r\n$5\r", want: nil, rest: 17},
		{name: "partial body", in: "*1\r\n$4\r\nPI", want: nil, rest: 10},
		{name: "binary arg", in: "*2\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n", want: [][]string{{"ECHO", "a\r\nb"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewParser(Limits{})
			b := []byte(tt.in)
			var got [][]string
			for {
				args, n, err := p.Next(b, true)
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if n == 0 {
					break
				}
				got = append(got, strs(args))
				b = b[n:]
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d commands %q, want %d %q", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if strings.Join(got[i], "|") != strings.Join(tt.want[i], "|") {
					t.Errorf("command %d: got %q, want %q", i, got[i], tt.want[i])
				}
			}
			if len(b) != tt.rest {
				t.Errorf("got %d bytes left, want %d", len(b), tt.rest)
			}
		})
	}
}

func strs(args [][]byte) []string {
	if len(args) == 0 {
		return nil
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = string(a)
	}
	return out
}

func TestParserHostile(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		authed bool
		want   string // protocol error text
	}{
		// The two inputs that take down redcon v1.6.4 (docs/HAZARDS.md), and Redis's protocol.tcl cases.
		{name: "huge bulk", in: "*1\r\n$9223372036854775807\r\nab", authed: true, want: "invalid bulk length"},
		{name: "huge multibulk", in: "*3000000000\r\n", authed: true, want: "invalid multibulk length"},
		{name: "max int multibulk", in: "*9223372036854775807\r\n", authed: true, want: "invalid multibulk length"},
		{name: "multibulk 20 digits", in: "*20000000000000000000\r\n", authed: true, want: "invalid multibulk length"},
		{name: "negative bulk", in: "*1\r\n$-10\r\n", authed: true, want: "invalid bulk length"},
		{name: "bulk above limit", in: "*1\r\n$2000000000\r\n", authed: true, want: "invalid bulk length"},
		{name: "not a number", in: "*20k\r\n", authed: true, want: "invalid multibulk length"},
		{name: "bulk not a number", in: "*1\r\n$blabla\r\n", authed: true, want: "invalid bulk length"},
		{name: "missing dollar", in: "*1\r\nfoo\r\n", authed: true, want: "expected '$', got 'f'"},
		{name: "no CRLF after bulk", in: "*1\r\n$3\r\nfooXY", authed: true, want: "expected CRLF after bulk"},
		{name: "header garbage", in: "*1" + strings.Repeat("1", 40), authed: true, want: "invalid multibulk length"},
		{name: "inline too big", in: strings.Repeat("a", 70*1024), authed: true, want: "too big inline request"},
		{name: "unauth multibulk", in: "*11\r\n", authed: false, want: "unauthenticated multibulk length"},
		{name: "unauth bulk", in: "*1\r\n$20000\r\n", authed: false, want: "unauthenticated bulk length"},
		{name: "unauth inline", in: "a b c d e f g h i j k\r\n", authed: false, want: "unauthenticated multibulk length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewParser(Limits{})
			_, _, err := p.Next([]byte(tt.in), tt.authed)
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want protocol error %q", err, tt.want)
			}
			if pe.msg != tt.want {
				t.Errorf("got %q, want %q", pe.msg, tt.want)
			}
		})
	}
}

// TestParserTrickle feeds a command one byte at a time: the resumable parser must produce the
// same command, and must not rescan what it already parsed (the work stays linear).
func TestParserTrickle(t *testing.T) {
	var cmd bytes.Buffer
	cmd.WriteString("*1001\r\n$3\r\nSET\r\n")
	for i := 0; i < 1000; i++ {
		cmd.WriteString("$1\r\nx\r\n")
	}
	full := cmd.Bytes()
	p := NewParser(Limits{})
	for i := 1; i <= len(full); i++ {
		args, n, err := p.Next(full[:i], true)
		if err != nil {
			t.Fatalf("at %d: %v", i, err)
		}
		if i < len(full) && n != 0 {
			t.Fatalf("at %d: got a command before the end", i)
		}
		if i == len(full) {
			if n != len(full) || len(args) != 1001 {
				t.Fatalf("got n=%d args=%d, want %d and 1001", n, len(args), len(full))
			}
		}
	}
}

// FuzzParser checks the parser's invariants on any input, fed whole and split at a point:
// no panic; consumed bytes within the input; every argument inside the input; the same
// commands however the input is split.
func FuzzParser(f *testing.F) {
	seeds := []string{
		"*2\r\n$4\r\nINCR\r\n$5\r\norder\r\n",
		"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n",
		"PING\r\n",
		"*1\r\n$9223372036854775807\r\nab",
		"*3000000000\r\n",
		"*20k\r\n",
		"*1\r\n$-10\r\n",
		"*1\r\n$blabla\r\n",
		"*1\r\nfoo\r\n",
		"*0\r\n\r\n",
		"$1\r\n",
		"*-1\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n",
		"\x00\xff*\r\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint16(3), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint16, authed bool) {
		whole := parseAll(t, in, len(in), authed)
		cut := int(split) % (len(in) + 1)
		parts := parseAll(t, in, cut, authed)
		if whole != parts {
			t.Fatalf("split at %d changed the result:\n whole %q\n split %q", cut, whole, parts)
		}
	})
}

// parseAll parses in, first offering only in[:cut] and then the rest, and returns a
// description of the commands (and the error, if any).
func parseAll(t *testing.T, in []byte, cut int, authed bool) string {
	t.Helper()
	p := NewParser(Limits{MaxMultibulk: 64, MaxBulk: 256, MaxInline: 256})
	var out strings.Builder
	start, avail := 0, cut
	for {
		b := in[start:avail]
		args, n, err := p.Next(b, authed)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("non-protocol error %v", err)
			}
			// A split may detect an error at a different byte but never a different kind.
			out.WriteString("ERR")
			return out.String()
		}
		if n < 0 || n > len(b) {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		if n == 0 {
			if avail == len(in) {
				return out.String()
			}
			avail = len(in)
			continue
		}
		for _, a := range args {
			out.WriteString(string(a))
			out.WriteByte('|')
		}
		out.WriteByte('\n')
		start += n
	}
}

// parsedBigCommand is a parser whose cap is raised to n arguments that has just parsed one
// command of n empty arguments.
func parsedBigCommand(t *testing.T, n int) *Parser {
	t.Helper()
	var big bytes.Buffer
	fmt.Fprintf(&big, "*%d\r\n", n)
	for i := 0; i < n; i++ {
		big.WriteString("$0\r\n\r\n")
	}
	p := NewParser(Limits{MaxMultibulk: n})
	if args, _, err := p.Next(big.Bytes(), true); err != nil || len(args) != n {
		t.Fatalf("big command: got %d args, %v", len(args), err)
	}
	return p
}

// TestParserReleasesLargeArgLists: one command with a huge argument count must not leave the
// parser holding argument tables sized for it for the rest of the connection (the read buffer
// is given back after such a command; the tables must be too).
func TestParserReleasesLargeArgLists(t *testing.T) {
	p := parsedBigCommand(t, 100000)
	if args, _, err := p.Next([]byte("*1\r\n$4\r\nPING\r\n"), true); err != nil || len(args) != 1 {
		t.Fatalf("PING: got %q, %v", args, err)
	}
	if cap(p.args) > 1024 || cap(p.offs) > 2048 {
		t.Errorf("after a small command the parser still holds room for %d args and %d offsets", cap(p.args), cap(p.offs))
	}
}
