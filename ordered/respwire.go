package ordered

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The Forwarder's side of RESP: requests written as arrays of bulk strings, replies read
// into reusable Reply values, bounded.

// appendCommand appends args as a RESP array of bulk strings.
func appendCommand(b []byte, args [][]byte) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// AddRaw appends a request already encoded as one RESP array of bulk strings (a client's
// command as it sent it, resp.Conn.RawCommand): the same as Add of its arguments.
func (c *Call) AddRaw(cmd []byte) {
	c.buf = append(c.buf, cmd...)
	c.n++
}

// maxReplyDepth bounds nested arrays; maxReplyLen bounds a bulk string or an array.
const (
	maxReplyDepth = 4
	maxReplyLen   = 1 << 20
)

// readReply reads one RESP2 reply into r, reusing its buffers.
func readReply(br *bufio.Reader, r *Reply, depth int) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return errors.New("malformed reply line")
	}
	body := line[1 : len(line)-2]
	r.Kind = line[0]
	r.Str = r.Str[:0]
	r.Elems = r.Elems[:0]
	switch r.Kind {
	case '+', '-':
		r.Str = append(r.Str, body...)
		return nil
	case ':':
		r.Int, err = parseReplyInt(body)
		return err
	case '_':
		return nil
	case '$', '*':
		n, err := parseReplyInt(body)
		if err != nil || n > maxReplyLen || n < -1 {
			return fmt.Errorf("malformed length %q", body)
		}
		if n == -1 {
			r.Kind = '_'
			return nil
		}
		if r.Kind == '$' {
			if cap(r.Str) < int(n)+2 {
				r.Str = make([]byte, n+2)
			}
			r.Str = r.Str[:n+2]
			if _, err := io.ReadFull(br, r.Str); err != nil {
				return err
			}
			r.Str = r.Str[:n]
			return nil
		}
		if depth >= maxReplyDepth {
			return errors.New("reply nested too deep")
		}
		if cap(r.Elems) < int(n) {
			r.Elems = make([]Reply, n)
		}
		r.Elems = r.Elems[:n]
		for i := range r.Elems {
			if err := readReply(br, &r.Elems[i], depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unexpected reply type %q", r.Kind)
}

// maxReplyLine bounds a reply's line (its type and length, or a simple string or error).
const maxReplyLine = 64 << 10

// parseReply parses one RESP2 reply at the start of b into r, reusing its buffers, and
// returns its length; 0 (and no error) when b holds only a part of it (r is then partly
// written: parse it again, into the same r, once more bytes are in).
func parseReply(b []byte, r *Reply, depth int) (int, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > maxReplyLine {
			return 0, errors.New("reply line too long")
		}
		return 0, nil
	}
	line := b[:i+1]
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, errors.New("malformed reply line")
	}
	body := line[1 : len(line)-2]
	r.Kind = line[0]
	r.Str = r.Str[:0]
	r.Elems = r.Elems[:0]
	off := len(line)
	switch r.Kind {
	case '+', '-':
		r.Str = append(r.Str, body...)
		return off, nil
	case ':':
		var err error
		r.Int, err = parseReplyInt(body)
		return off, err
	case '_':
		return off, nil
	case '$', '*':
		n, err := parseReplyInt(body)
		if err != nil || n > maxReplyLen || n < -1 {
			return 0, fmt.Errorf("malformed length %q", body)
		}
		if n == -1 {
			r.Kind = '_'
			return off, nil
		}
		if r.Kind == '$' {
			end := off + int(n) + 2
			if len(b) < end {
				return 0, nil
			}
			if b[end-2] != '\r' || b[end-1] != '\n' {
				return 0, errors.New("malformed bulk string")
			}
			r.Str = append(r.Str, b[off:end-2]...)
			return end, nil
		}
		if depth >= maxReplyDepth {
			return 0, errors.New("reply nested too deep")
		}
		if cap(r.Elems) < int(n) {
			r.Elems = make([]Reply, n)
		}
		r.Elems = r.Elems[:n]
		for k := range r.Elems {
			m, err := parseReply(b[off:], &r.Elems[k], depth+1)
			if err != nil || m == 0 {
				return 0, err
			}
			off += m
		}
		return off, nil
	}
	return 0, fmt.Errorf("unexpected reply type %q", r.Kind)
}

var errReplyInt = errors.New("malformed integer in reply")

// parseReplyInt parses a RESP integer without allocating (strconv.ParseInt of string(b)
// makes the string escape, one allocation per reply).
func parseReplyInt(b []byte) (int64, error) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, errReplyInt
	}
	var n uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, errReplyInt
		}
		n = n*10 + uint64(ch-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0, errReplyInt
		}
		return -int64(n), nil
	}
	if n > 1<<63-1 {
		return 0, errReplyInt
	}
	return int64(n), nil
}

// scanReply finds the extent of one RESP2 reply at the start of b, checked as parseReply
// checks it, without copying it anywhere: its length, 0 (and no error) when b holds only a
// part of it. pass reports a reply that Call.Raw may carry as it is: an integer, a bulk
// string (not null), a simple string or an error without a CR inside (a client connection
// would write it with the same bytes, in RESP2 and RESP3 alike).
func scanReply(b []byte, depth int) (n int, pass bool, err error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > maxReplyLine {
			return 0, false, errors.New("reply line too long")
		}
		return 0, false, nil
	}
	if i < 2 || b[i-1] != '\r' {
		return 0, false, errors.New("malformed reply line")
	}
	body := b[1 : i-1]
	off := i + 1
	switch b[0] {
	case '+', '-':
		return off, bytes.IndexByte(body, '\r') < 0, nil
	case ':':
		if _, err := parseReplyInt(body); err != nil {
			return 0, false, err
		}
		return off, true, nil
	case '_':
		return off, false, nil
	case '$', '*':
		m, err := parseReplyInt(body)
		if err != nil || m > maxReplyLen || m < -1 {
			return 0, false, fmt.Errorf("malformed length %q", body)
		}
		if m == -1 {
			return off, false, nil
		}
		if b[0] == '$' {
			end := off + int(m) + 2
			if len(b) < end {
				return 0, false, nil
			}
			if b[end-2] != '\r' || b[end-1] != '\n' {
				return 0, false, errors.New("malformed bulk string")
			}
			return end, true, nil
		}
		if depth >= maxReplyDepth {
			return 0, false, errors.New("reply nested too deep")
		}
		for k := int64(0); k < m; k++ {
			e, _, err := scanReply(b[off:], depth+1)
			if err != nil || e == 0 {
				return 0, false, err
			}
			off += e
		}
		return off, false, nil
	}
	return 0, false, fmt.Errorf("unexpected reply type %q", b[0])
}

// settle makes the replies read (raw, each checked by scanReply) the call's result: Raw
// when every one may pass as it is, else parsed into Replies.
func (c *Call) settle() {
	if !c.mixed {
		c.Raw = c.raw
		return
	}
	c.parseRaw()
}

// ParseReplies fills Replies from Raw (a call that finished without Err), for a caller that
// wants the replies one by one; Raw is then nil.
func (c *Call) ParseReplies() {
	if c.Err == nil && c.Raw != nil {
		c.parseRaw()
	}
}

// parseRaw parses raw into Replies.
func (c *Call) parseRaw() {
	c.Raw = nil
	off := 0
	for i := range c.Replies[:c.n] {
		m, err := parseReply(c.raw[off:], &c.Replies[i], 0)
		if err != nil || m == 0 { // scanReply took every one whole: not seen
			c.Err = fmt.Errorf("%w: a reply read whole does not parse", ErrUnreachable)
			return
		}
		off += m
	}
}
