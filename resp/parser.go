package resp

import (
	"bytes"
	"errors"
)

// ProtocolError is a malformed or over-limit request. The server answers it with
// "-ERR Protocol error: <msg>" and closes the connection, like Redis.
type ProtocolError struct{ msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.msg }

// Reply is the error reply sent for the protocol error.
func (e *ProtocolError) Reply() string { return "ERR Protocol error: " + e.msg }

func protoErr(msg string) error { return &ProtocolError{msg: msg} }

// maxHeaderLen bounds a "*<n>\r\n" or "$<n>\r\n" header: a sign, 19 digits, CRLF and slack.
// A header that long without its CRLF is garbage, not a header still arriving.
const maxHeaderLen = 32

// maxKeptArgs bounds the argument count the parser keeps room for between commands.
const maxKeptArgs = 1024

// Limits bound what one request may make the server hold. A zero field takes the default
// of DefaultLimits.
type Limits struct {
	// MaxMultibulk is the largest argument count of one command, the command name included
	// (default 1024; Redis allows 1024*1024, which no leafd command needs). More is answered
	// with Redis's "-ERR Protocol error: invalid multibulk length" and the connection closed;
	// it bounds the parser's argument tables (see MaxArgTables).
	MaxMultibulk int
	// MaxBulk is the largest single argument in bytes (Redis: proto-max-bulk-len, 512 MB;
	// leafd has no use for large values).
	MaxBulk int
	// MaxInline is the longest inline command line (Redis: 64 KiB).
	MaxInline int
	// UnauthMultibulk and UnauthBulk are the tighter limits before AUTH when a password is
	// required (Redis: 10 arguments, 16 KiB; CVE-2021-32675).
	UnauthMultibulk int
	UnauthBulk      int
}

// DefaultLimits returns Redis's protocol limits, with a 1 MiB bulk cap and 1024 arguments.
func DefaultLimits() Limits {
	return Limits{
		MaxMultibulk:    DefaultMaxArgs,
		MaxBulk:         1 << 20,
		MaxInline:       64 * 1024,
		UnauthMultibulk: 10,
		UnauthBulk:      16 * 1024,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxMultibulk <= 0 {
		l.MaxMultibulk = d.MaxMultibulk
	}
	if l.MaxBulk <= 0 {
		l.MaxBulk = d.MaxBulk
	}
	if l.MaxInline <= 0 {
		l.MaxInline = d.MaxInline
	}
	if l.UnauthMultibulk <= 0 {
		l.UnauthMultibulk = d.UnauthMultibulk
	}
	if l.UnauthBulk <= 0 {
		l.UnauthBulk = d.UnauthBulk
	}
	return l
}

// Parser reads commands out of a byte buffer. It is resumable: when a command is incomplete
// it keeps what it has parsed (as offsets from the command start) and carries on from there
// when called again with the same bytes extended, so a command trickled in byte by byte costs
// linear time. The arguments it returns alias the buffer passed in.
type Parser struct {
	lim Limits

	inCmd   bool  // a multibulk header has been read
	want    int   // argument count announced by the header
	pos     int   // offset from the command start of the first unparsed byte
	scanned int   // inline: how far the search for '\n' got
	offs    []int // start, end pairs of the arguments parsed so far
	args    [][]byte
	scratch []byte // inline: unquoted arguments (inline.go)

	// Need is, after an incomplete parse, the number of bytes (from the command start) that
	// the next step needs; the connection grows its buffer to hold them.
	Need int
}

// NewParser returns a parser enforcing lim.
func NewParser(lim Limits) *Parser {
	return &Parser{lim: lim.withDefaults(), offs: make([]int, 0, 16), args: make([][]byte, 0, 8)}
}

// Reset drops any partial command.
func (p *Parser) Reset() {
	p.inCmd, p.want, p.pos, p.scanned, p.Need = false, 0, 0, 0, 0
	p.offs = p.offs[:0]
}

var errIncomplete = errors.New("incomplete")

// Next parses one command from b, which must start at the start of the command (the bytes
// consumed by earlier calls removed). It returns the arguments and the number of bytes the
// command used. n == 0 with a nil error means more bytes are needed; args may be empty with
// n > 0 (an empty line or "*0"), which is no command at all. authed selects the limits.
func (p *Parser) Next(b []byte, authed bool) (args [][]byte, n int, err error) {
	if !p.inCmd {
		// The argument tables of one huge command (up to MaxMultibulk arguments, several
		// times the bytes of the command) are not kept for the rest of the connection.
		if cap(p.args) > maxKeptArgs {
			p.args = make([][]byte, 0, 8)
		}
		if cap(p.offs) > 2*maxKeptArgs {
			p.offs = make([]int, 0, 16)
		}
		if len(b) == 0 {
			return nil, 0, nil
		}
		if b[0] != '*' {
			return p.inline(b, authed)
		}
		count, hdr, err := readHeader(b, 1)
		if err == errIncomplete {
			if len(b) > maxHeaderLen {
				return nil, 0, protoErr("invalid multibulk length")
			}
			p.Need = len(b) + 1
			return nil, 0, nil
		}
		if err != nil {
			return nil, 0, protoErr("invalid multibulk length")
		}
		if count <= 0 {
			// Redis ignores "*0" and "*-1".
			return p.args[:0], hdr, nil
		}
		if !authed && count > int64(p.lim.UnauthMultibulk) {
			return nil, 0, protoErr("unauthenticated multibulk length")
		}
		if count > int64(p.lim.MaxMultibulk) {
			return nil, 0, protoErr("invalid multibulk length")
		}
		p.inCmd, p.want, p.pos = true, int(count), hdr
		p.offs = p.offs[:0]
	}
	maxBulk := p.lim.MaxBulk
	if !authed && p.lim.UnauthBulk < maxBulk {
		maxBulk = p.lim.UnauthBulk
	}
	for len(p.offs)/2 < p.want {
		if p.pos >= len(b) {
			p.Need = p.pos + 1
			return nil, 0, nil
		}
		if b[p.pos] != '$' {
			return nil, 0, protoErr("expected '$', got '" + printable(b[p.pos]) + "'")
		}
		size, hdr, err := readHeader(b, p.pos+1)
		if err == errIncomplete {
			if len(b)-p.pos > maxHeaderLen {
				return nil, 0, protoErr("invalid bulk length")
			}
			p.Need = len(b) + 1
			return nil, 0, nil
		}
		if err != nil || size < 0 {
			return nil, 0, protoErr("invalid bulk length")
		}
		if size > int64(maxBulk) {
			if !authed && size > int64(p.lim.UnauthBulk) && size <= int64(p.lim.MaxBulk) {
				return nil, 0, protoErr("unauthenticated bulk length")
			}
			return nil, 0, protoErr("invalid bulk length")
		}
		start := hdr
		end := start + int(size)
		if end+2 > len(b) {
			p.Need = end + 2
			return nil, 0, nil
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return nil, 0, protoErr("expected CRLF after bulk")
		}
		p.offs = append(p.offs, start, end)
		p.pos = end + 2
	}
	p.args = p.args[:0]
	for i := 0; i < len(p.offs); i += 2 {
		p.args = append(p.args, b[p.offs[i]:p.offs[i+1]:p.offs[i+1]])
	}
	n = p.pos
	p.inCmd, p.pos, p.Need = false, 0, 0
	p.offs = p.offs[:0]
	return p.args, n, nil
}

// inline parses a command sent as a plain text line (telnet style).
func (p *Parser) inline(b []byte, authed bool) ([][]byte, int, error) {
	maxInline := p.inlineLimit(authed)
	i := bytes.IndexByte(b[p.scanned:], '\n')
	if i < 0 {
		if len(b) > maxInline {
			return nil, 0, protoErr("too big inline request")
		}
		p.scanned = len(b)
		p.Need = len(b) + 1
		return nil, 0, nil
	}
	end := p.scanned + i
	p.scanned, p.Need = 0, 0
	if end > maxInline {
		return nil, 0, protoErr("too big inline request")
	}
	line := b[:end]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	var ok bool
	p.args, p.scratch, ok = splitInline(p.args[:0], line, p.scratch)
	if !ok {
		return nil, 0, protoErr(errUnbalancedQuotes)
	}
	if !authed && len(p.args) > p.lim.UnauthMultibulk {
		return nil, 0, protoErr("unauthenticated multibulk length")
	}
	if len(p.args) > p.lim.MaxMultibulk {
		return nil, 0, protoErr("too big inline request")
	}
	return p.args, end + 1, nil
}

// readHeader reads the decimal integer that starts at b[i] and ends with CRLF. It returns the
// value and the offset just past the CRLF. Overflow, empty numbers and stray bytes are errors.
func readHeader(b []byte, i int) (int64, int, error) {
	j := i
	neg := false
	if j < len(b) && b[j] == '-' {
		neg = true
		j++
	}
	var v int64
	digits := 0
	for ; j < len(b); j++ {
		c := b[j]
		if c == '\r' {
			break
		}
		if c < '0' || c > '9' || digits >= 18 {
			// 18 digits keep v far below overflow; every limit is far smaller anyway.
			return 0, 0, errors.New("bad integer")
		}
		v = v*10 + int64(c-'0')
		digits++
	}
	if j+1 >= len(b) {
		return 0, 0, errIncomplete
	}
	if digits == 0 || b[j+1] != '\n' {
		return 0, 0, errors.New("bad integer")
	}
	if neg {
		v = -v
	}
	return v, j + 2, nil
}

func printable(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return string(rune(c))
	}
	return "\\x" + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15])
}
