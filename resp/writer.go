package resp

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// The reply writers append to the connection's output buffer; nothing is sent until the
// server flushes it, once per batch of pipelined commands. None of them allocates once the
// buffer has grown to its working size. The RESP2 encodings are redcon's append functions
// (its write side is pure and safe; only its read path is unbounded); the RESP3 types are
// ours.

// WriteInt writes an integer reply.
func (c *Conn) WriteInt(v int64) { c.out = redcon.AppendInt(c.out, v) }

// WriteBulk writes a bulk string reply.
func (c *Conn) WriteBulk(b []byte) { c.out = redcon.AppendBulk(c.out, b) }

// WriteBulkString writes a bulk string reply.
func (c *Conn) WriteBulkString(s string) { c.out = redcon.AppendBulkString(c.out, s) }

// WriteVerbatim writes text as a RESP3 verbatim string ("txt") or, in RESP2, a bulk string;
// Redis replies to INFO and CLIENT INFO this way.
func (c *Conn) WriteVerbatim(s string) {
	if c.proto < 3 {
		c.WriteBulkString(s)
		return
	}
	c.out = append(c.out, '=')
	c.out = strconv.AppendInt(c.out, int64(len(s)+4), 10)
	c.out = append(c.out, "\r\ntxt:"...)
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// WriteSimple writes a simple string reply such as OK or PONG.
func (c *Conn) WriteSimple(s string) { c.out = redcon.AppendString(c.out, s) }

// WriteError writes an error reply. msg starts with the error code ("NOTAG ...", "ERR ...");
// CR and LF inside it are replaced by spaces so a reply can never break the framing.
func (c *Conn) WriteError(msg string) { c.out = redcon.AppendError(c.out, msg) }

// WriteRaw appends replies already encoded, as they are: the caller vouches that they are
// well-formed RESP and the same in the connection's protocol (Proto) — integers, bulk
// strings, simple strings and errors read back from another server are.
func (c *Conn) WriteRaw(b []byte) { c.out = append(c.out, b...) }

// WriteArray writes the header of an array of n elements; the elements follow.
func (c *Conn) WriteArray(n int) { c.out = redcon.AppendArray(c.out, n) }

// WriteMap writes the header of a map of n key/value pairs: a RESP3 map, or in RESP2 a flat
// array of 2n elements, as Redis does.
func (c *Conn) WriteMap(n int) {
	if c.proto < 3 {
		c.WriteArray(2 * n)
		return
	}
	c.out = append(c.out, '%')
	c.out = strconv.AppendInt(c.out, int64(n), 10)
	c.out = append(c.out, '\r', '\n')
}

// WriteSet writes the header of a set of n elements: a RESP3 set, or an array in RESP2.
func (c *Conn) WriteSet(n int) {
	if c.proto < 3 {
		c.WriteArray(n)
		return
	}
	c.out = append(c.out, '~')
	c.out = strconv.AppendInt(c.out, int64(n), 10)
	c.out = append(c.out, '\r', '\n')
}

// WriteNull writes a null: "_" in RESP3, a null bulk string in RESP2.
func (c *Conn) WriteNull() {
	if c.proto < 3 {
		c.out = redcon.AppendNull(c.out)
		return
	}
	c.out = append(c.out, "_\r\n"...)
}

// WriteInts writes an array of integers.
func (c *Conn) WriteInts(vs []int64) {
	c.WriteArray(len(vs))
	for _, v := range vs {
		c.WriteInt(v)
	}
}
