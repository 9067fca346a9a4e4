package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// ReplyError is an error reply from the server ("-NOTAG ...").
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return e.Msg }

// ErrProtocol reports a reply the reader cannot parse.
var ErrProtocol = errors.New("bench: malformed reply")

// maxDepth bounds the nesting of aggregate replies.
const maxDepth = 8

// Reader reads RESP replies from a connection into a fixed buffer. It allocates nothing for
// integer, array, simple-string, bulk and null replies (only an error reply allocates its
// message), so that the load generator is never the bottleneck. It is not safe for
// concurrent use.
type Reader struct {
	rd   io.Reader
	buf  []byte
	r, w int
}

// NewReader returns a reader with a buffer of size bytes (at least 512); a line longer than
// the buffer is a protocol error.
func NewReader(rd io.Reader, size int) *Reader {
	return &Reader{rd: rd, buf: make([]byte, max(size, 512))}
}

// ReadReply reads one reply. The integers it holds (an integer reply, or the integers of an
// array, set or map, at any depth) are appended to dst. An error reply is returned as a
// *ReplyError, after the reply has been consumed so the next one can be read; any other
// error means the connection is unusable.
func (r *Reader) ReadReply(dst []int64) ([]int64, error) {
	return r.read(dst, 0)
}

func (r *Reader) read(dst []int64, depth int) ([]int64, error) {
	line, err := r.line()
	if err != nil {
		return dst, err
	}
	if len(line) == 0 {
		return dst, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	switch line[0] {
	case ':':
		v, ok := parseInt(line[1:])
		if !ok {
			return dst, fmt.Errorf("%w: bad integer %q", ErrProtocol, line)
		}
		return append(dst, v), nil
	case '+', '_', '#', ',', '(':
		return dst, nil
	case '-', '!':
		return dst, &ReplyError{Msg: string(line[1:])}
	case '$', '=':
		n, ok := parseInt(line[1:])
		if !ok || n < -1 {
			return dst, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, line)
		}
		if n == -1 {
			return dst, nil
		}
		return dst, r.skip(n + 2)
	case '*', '~', '>', '%', '|':
		n, ok := parseInt(line[1:])
		if !ok || n < -1 {
			return dst, fmt.Errorf("%w: bad aggregate length %q", ErrProtocol, line)
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		if depth >= maxDepth {
			return dst, fmt.Errorf("%w: nested deeper than %d", ErrProtocol, maxDepth)
		}
		var firstErr error
		for ; n > 0; n-- {
			dst, err = r.read(dst, depth+1)
			var re *ReplyError
			if errors.As(err, &re) {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			if err != nil {
				return dst, err
			}
		}
		if line[0] == '|' { // an attribute precedes the actual reply
			return r.read(dst, depth)
		}
		return dst, firstErr
	}
	return dst, fmt.Errorf("%w: unknown type %q", ErrProtocol, line[0])
}

// line returns the next line without its CRLF; it aliases the buffer until the next call.
func (r *Reader) line() ([]byte, error) {
	for {
		if i := bytes.IndexByte(r.buf[r.r:r.w], '\n'); i >= 0 {
			start, end := r.r, r.r+i // buf[end] is the LF
			r.r = end + 1
			if end == start || r.buf[end-1] != '\r' {
				return nil, fmt.Errorf("%w: line not ended by CRLF", ErrProtocol)
			}
			return r.buf[start : end-1], nil
		}
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
}

// skip discards n bytes.
func (r *Reader) skip(n int64) error {
	for n > 0 {
		if r.r == r.w {
			if err := r.fill(); err != nil {
				return err
			}
		}
		k := min(n, int64(r.w-r.r))
		r.r += int(k)
		n -= k
	}
	return nil
}

// fill reads more bytes, first moving the unread ones to the front of the buffer.
func (r *Reader) fill() error {
	if r.r > 0 {
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
	}
	if r.w == len(r.buf) {
		return fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, len(r.buf))
	}
	n, err := r.rd.Read(r.buf[r.w:])
	r.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// parseInt parses a decimal int64 without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		nv := v*10 + uint64(c-'0')
		if nv < v || v > (1<<64-1)/10 {
			return 0, false
		}
		v = nv
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}
