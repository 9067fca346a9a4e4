package resp

import (
	"math"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Resource bounds that are not part of parsing itself: the argument cap's default, the
// release of argument tables after a command, the pre-AUTH inline limit, and the output
// limit per connection (checked by Conn.serve).

// DefaultMaxArgs is the default cap on the arguments of one command, the name included.
// leafd's longest commands (COMMAND INFO, CONFIG GET, INFO with sections) stay far below it.
const DefaultMaxArgs = 1024

// argTableBytes is what the parser keeps per argument while a command is parsed and run:
// a start/end pair of ints (16 bytes) and a slice header (24 bytes).
const argTableBytes = 16 + 24

// MaxArgTables is the most the parser of one connection holds in argument tables for
// limits l: 40 bytes per argument of the largest command, twice over for the slack of
// append's growth. With the defaults it is 80 KiB.
func MaxArgTables(l Limits) int {
	l = l.withDefaults()
	return 2 * argTableBytes * l.MaxMultibulk
}

// Release gives back argument tables grown past what the parser keeps between commands. The
// connection calls it once the command's handler has returned, so the tables of one large
// command do not stay with an idle connection until its next command.
func (p *Parser) Release() {
	if cap(p.args) > maxKeptArgs {
		p.args = make([][]byte, 0, 8)
	}
	if cap(p.offs) > 2*maxKeptArgs {
		p.offs = make([]int, 0, 16)
	}
}

// inlineLimit is the longest inline command line accepted: before AUTH the unauthenticated
// bulk limit applies to the whole line (16 KiB by default), as it does to each multibulk
// argument.
func (p *Parser) inlineLimit(authed bool) int {
	if !authed && p.lim.UnauthBulk < p.lim.MaxInline {
		return p.lim.UnauthBulk
	}
	return p.lim.MaxInline
}

// limitLog logs a limit's closures at most once per interval, with the count of those it
// left out, so that a client reconnecting in a loop cannot flood the log.
type limitLog struct {
	last       atomic.Int64 // unix ns of the last line
	suppressed atomic.Int64
}

const limitLogEvery = time.Second

// log writes msg with fields unless a line was written within limitLogEvery.
func (l *limitLog) log(log *zap.Logger, now time.Time, msg string, fields ...zap.Field) {
	last := l.last.Load()
	if now.UnixNano()-last < int64(limitLogEvery) || !l.last.CompareAndSwap(last, now.UnixNano()) {
		l.suppressed.Add(1)
		return
	}
	if n := l.suppressed.Swap(0); n > 0 {
		fields = append(fields, zap.Int64("suppressed_since_last", n))
	}
	log.Warn(msg, fields...)
}

// AuthFailures is the number of failed authentications on this connection.
func (c *Conn) AuthFailures() int { return c.authFails }

// NoteAuthFailure counts a failed authentication that Authenticate did not see (an unknown
// user name).
func (c *Conn) NoteAuthFailure() { c.authFails++ }

// OutputExceeded reports whether the reply of the running command has grown past
// MaxOutputBuffer. A command that writes many replies as one (EXEC) checks it between them
// and stops: the connection is closed after the command anyway, and the rest would only take
// memory.
func (c *Conn) OutputExceeded() bool {
	lim := c.srv.cfg.MaxOutputBuffer
	return lim > 0 && len(c.out)-c.replyStart > lim
}

// OutputRoom is how many more bytes the running command may write before its reply passes
// MaxOutputBuffer (math.MaxInt without a limit). A command that can count its reply first
// (IDS.MARKS) answers an error instead of a reply that would close the connection.
func (c *Conn) OutputRoom() int {
	lim := c.srv.cfg.MaxOutputBuffer
	if lim <= 0 {
		return math.MaxInt
	}
	return max(0, lim-(len(c.out)-c.replyStart))
}
