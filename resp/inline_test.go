package resp

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"
)

// The expected splits were checked against redis-server 7.0.15 (ECHO of each line).
func TestSplitInline(t *testing.T) {
	tests := []struct {
		name string
		line string
		want []string // nil with bad: unbalanced quotes
		bad  bool
	}{
		{name: "plain", line: "INCR order", want: []string{"INCR", "order"}},
		{name: "blanks around", line: "  ECHO \t  x  ", want: []string{"ECHO", "x"}},
		{name: "empty line", line: "   ", want: nil},
		{name: "double quotes keep spaces", line: `ECHO "a b"`, want: []string{"ECHO", "a b"}},
		{name: "hex escapes", line: `ECHO "\x41\x4a"`, want: []string{"ECHO", "AJ"}},
		{name: "hex escape needs two hex digits", line: `ECHO "\x4g"`, want: []string{"ECHO", "x4g"}},
		{name: "short hex escape", line: `ECHO "\x4"`, want: []string{"ECHO", "x4"}},
		{name: "other escapes", line: `ECHO "\n\r\t\b\a\q\\\""`, want: []string{"ECHO", "\n\r\t\b\aq\\\""}},
		{name: "single quote escape", line: `ECHO 'it\'s'`, want: []string{"ECHO", "it's"}},
		{name: "single quotes are literal", line: `ECHO 'a\nb'`, want: []string{"ECHO", `a\nb`}},
		{name: "quote inside an argument", line: `ECHO a"b c"`, want: []string{"ECHO", "ab c"}},
		{name: "empty double quotes", line: `ECHO ""`, want: []string{"ECHO", ""}},
		{name: "empty single quotes", line: `ECHO ''`, want: []string{"ECHO", ""}},
		{name: "vertical tab skipped between", line: "ECHO \vx", want: []string{"ECHO", "x"}},
		{name: "vertical tab inside an argument", line: "ECHO a\vb", want: []string{"ECHO", "a\vb"}},
		{name: "vertical tab after a quote", line: "ECHO \"a\"\v", want: []string{"ECHO", "a"}},
		{name: "CR separates", line: "ECHO a\rb", want: []string{"ECHO", "a", "b"}},
		{name: "tab after a quote", line: "ECHO \"a\"\tb", want: []string{"ECHO", "a", "b"}},
		{name: "high bytes", line: "ECHO \xff\xfe", want: []string{"ECHO", "\xff\xfe"}},
		{name: "NUL ends the line", line: "ECHO a\x00b c", want: []string{"ECHO", "a"}},
		{name: "unclosed double quote", line: `INCR "foo`, bad: true},
		{name: "unclosed single quote", line: `INCR 'foo`, bad: true},
		{name: "text after a closing quote", line: `ECHO "a"b`, bad: true},
		{name: "text after a quote inside an argument", line: `ECHO a"b c"d`, bad: true},
		{name: "trailing backslash", line: `ECHO "\`, bad: true},
		{name: "lone quote at the end", line: `ECHO x"`, bad: true},
		{name: "cut hex escape", line: `ECHO "\x`, bad: true},
		{name: "NUL inside quotes", line: "ECHO \"a\x00b\"", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, _, ok := splitInline(nil, []byte(tt.line), nil)
			if ok == tt.bad {
				t.Fatalf("got ok=%v, want %v", ok, !tt.bad)
			}
			if tt.bad {
				return
			}
			if got := strs(args); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestInlineUnbalancedIsProtocolError: the parser turns unbalanced quotes into Redis's
// protocol error (the server then replies and closes).
func TestInlineUnbalancedIsProtocolError(t *testing.T) {
	p := NewParser(Limits{})
	_, _, err := p.Next([]byte("INCR \"foo\r\nPING\r\n"), true)
	var pe *ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a protocol error", err)
	}
	if got, want := pe.Reply(), "ERR Protocol error: unbalanced quotes in request"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestSplitInlineScratch: arguments unquoted into the scratch buffer stay intact while later
// ones are added, and a reused buffer makes splitting allocation-free.
func TestSplitInlineScratch(t *testing.T) {
	line := []byte(`"a b" "c d" "e f" g`)
	args, scratch, ok := splitInline(nil, line, make([]byte, 0, 1))
	if !ok {
		t.Fatal("got unbalanced, want ok")
	}
	if got := fmt.Sprintf("%q", strs(args)); got != `["a b" "c d" "e f" "g"]` {
		t.Errorf("got %s", got)
	}
	// Reusing the scratch buffer, plain and quoted lines do not allocate.
	for _, l := range []string{"INCR order", `ECHO "a b" 'c'`} {
		line := []byte(l)
		allocs := testing.AllocsPerRun(100, func() {
			args, scratch, _ = splitInline(args[:0], line, scratch)
		})
		if allocs != 0 {
			t.Errorf("%s: got %v allocations per line, want 0", l, allocs)
		}
	}
}

// refSplit is a second, independent reading of sdssplitargs for the fuzz test: it walks a
// NUL-terminated copy of the line with one cursor, as the C code walks its char pointer.
func refSplit(line []byte) ([]string, bool) {
	s := append(append([]byte{}, line...), 0, 0, 0, 0)
	at := func(i int) byte { return s[i] }
	space := func(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }
	hex := func(c byte) (byte, bool) {
		v, err := strconv.ParseUint(string(c), 16, 8)
		return byte(v), err == nil && c != '+' && c != '-'
	}
	var out []string
	p := 0
	for {
		for at(p) != 0 && space(at(p)) {
			p++
		}
		if at(p) == 0 {
			return out, true
		}
		var cur []byte
		inq, insq, done := false, false, false
		for !done {
			c := at(p)
			switch {
			case inq:
				h1, ok1 := hex(at(p + 2))
				h2, ok2 := hex(at(p + 3))
				switch {
				case c == '\\' && at(p+1) == 'x' && ok1 && ok2:
					cur = append(cur, h1*16+h2)
					p += 3
				case c == '\\' && at(p+1) != 0:
					p++
					m := map[byte]byte{'n': '\n', 'r': '\r', 't': '\t', 'b': '\b', 'a': '\a'}
					if e, ok := m[at(p)]; ok {
						cur = append(cur, e)
					} else {
						cur = append(cur, at(p))
					}
				case c == '"':
					if at(p+1) != 0 && !space(at(p+1)) {
						return nil, false
					}
					done = true
				case c == 0:
					return nil, false
				default:
					cur = append(cur, c)
				}
			case insq:
				switch {
				case c == '\\' && at(p+1) == '\'':
					p++
					cur = append(cur, '\'')
				case c == '\'':
					if at(p+1) != 0 && !space(at(p+1)) {
						return nil, false
					}
					done = true
				case c == 0:
					return nil, false
				default:
					cur = append(cur, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			if at(p) != 0 {
				p++
			}
		}
		out = append(out, string(cur))
	}
}

// FuzzSplitInline: splitInline agrees with the reference reading on any line.
func FuzzSplitInline(f *testing.F) {
	for _, s := range []string{`ECHO "a b"`, `"\x41\x4a" 'it\'s'`, `a"b c"d`, `"\`, "a\vb \v", "\"a\"\v", `""''`, "x\x00\"y"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // the parser cuts lines at LF before splitting
		}
		got, _, ok := splitInline(nil, line, nil)
		want, wantOK := refSplit(line)
		if ok != wantOK {
			t.Fatalf("%q: got ok=%v, want %v", line, ok, wantOK)
		}
		if ok && fmt.Sprintf("%q", strs(got)) != fmt.Sprintf("%q", nilIfEmpty(want)) {
			t.Fatalf("%q: got %q, want %q", line, strs(got), want)
		}
	})
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// quoteInline writes args as one inline line, every argument double-quoted with escapes
// (the form redis-cli and Redis's sdscatrepr print).
func quoteInline(args [][]byte) []byte {
	var b []byte
	for i, a := range args {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, '"')
		for _, c := range a {
			switch {
			case c == '\\' || c == '"':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, `\n`...)
			case c == '\r':
				b = append(b, `\r`...)
			case c == '\t':
				b = append(b, `\t`...)
			case c >= 0x20 && c < 0x7f:
				b = append(b, c)
			default:
				b = append(b, fmt.Sprintf(`\x%02x`, c)...)
			}
		}
		b = append(b, '"')
	}
	return append(b, '\r', '\n')
}

// FuzzInlineMatchesRESP: any command, sent in the RESP form and as a quoted inline line,
// reaches the handler as the same arguments.
func FuzzInlineMatchesRESP(f *testing.F) {
	f.Add([]byte("ECHO\x00a b\x00\"q\"\x00\\x41"), byte(0))
	f.Add([]byte("INCR\x00order"), byte(0))
	f.Add([]byte("\xff\x00\r\n\x00'"), byte(0))
	f.Fuzz(func(t *testing.T, raw []byte, sep byte) {
		parts := bytes.Split(raw, []byte{sep})
		if len(parts) > 64 {
			parts = parts[:64]
		}
		var resp []byte
		resp = fmt.Appendf(resp, "*%d\r\n", len(parts))
		for _, a := range parts {
			resp = fmt.Appendf(resp, "$%d\r\n%s\r\n", len(a), a)
		}
		viaRESP, _, err := NewParser(Limits{}).Next(resp, true)
		if err != nil {
			t.Fatalf("RESP form %q: %v", resp, err)
		}
		inline := quoteInline(parts)
		if len(inline) > DefaultLimits().MaxInline {
			return
		}
		viaInline, n, err := NewParser(Limits{}).Next(inline, true)
		if err != nil || n != len(inline) {
			t.Fatalf("inline form %q: got n=%d err=%v, want %d, nil", inline, n, err, len(inline))
		}
		if fmt.Sprintf("%q", strs(viaInline)) != fmt.Sprintf("%q", strs(viaRESP)) {
			t.Fatalf("inline %q gave %q, RESP gave %q", inline, strs(viaInline), strs(viaRESP))
		}
	})
}
