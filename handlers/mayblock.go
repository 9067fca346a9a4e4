package handlers

import (
	"math"

	"github.com/leafd/leafd/resp"
)

// Which commands may wait, for the event-loop server (resp.Blocker): the command table's
// mayWait flags (table.go) are the one place this is written. MayBlock finds the command as
// ServeRESP would, applies the same checks first (a command refused for its arity or NOAUTH,
// or queued inside MULTI, is answered at once) and then asks the command's flag. EXEC asks
// the flags of the commands it queued. A command that waits without its flag saying so is
// caught by the loop's watchdog after 10-20 ms, during which the loop's other connections
// stall (resp.Stats.LoopTakeovers counts those).

// maxExecOnLoop is the longest transaction EXEC runs on the loop (see waitExec).
const maxExecOnLoop = 64

// MayBlock reports whether running args on c may wait. It is cheap: a look-up among the
// few commands with a flag (cmdIndex) and the flag's own check (a segment's
// Generator.Serves for the ID commands).
func (h *Handler) MayBlock(c *resp.Conn, args [][]byte) bool {
	if cmd := h.waiters.find(args[0]); cmd != nil {
		return h.mayWait(c, cmd, args)
	}
	return false
}

// mayWait is cmd's flag for args on c, after ServeRESP's checks.
func (h *Handler) mayWait(c *resp.Conn, cmd *command, args [][]byte) bool {
	if (cmd.arity > 0 && len(args) != cmd.arity) || (cmd.arity < 0 && len(args) < -cmd.arity) {
		return false // refused on the spot
	}
	if !c.Authed() && !cmd.noAuth {
		return false // NOAUTH
	}
	if st, _ := c.State().(*connState); st != nil && st.multi && !cmd.immediate {
		return false // only queued
	}
	return cmd.mayWait(h, c, args)
}

// waitAlways: the command always calls the store or may be paced (AUTH: a failed one waits
// for its turn, up to a second; IDS.CREATE: a store call; IDS.MARKS: reads the marks store).
func waitAlways(*Handler, *resp.Conn, [][]byte) bool { return true }

// waitHelloAuth: HELLO waits when it authenticates (its AUTH option).
func waitHelloAuth(h *Handler, c *resp.Conn, args [][]byte) bool {
	for _, a := range args[2:] {
		if asciiEqualFold(a, "auth") {
			return true
		}
	}
	return false
}

// waitIncr, waitIncrBy and waitIDsSegment: the ID commands wait when their tag has not the
// values they need in memory (a tag's first load, or a switch the preload did not hide).
// A malformed count is answered by the command itself, at once.
func waitIncr(h *Handler, c *resp.Conn, args [][]byte) bool {
	return !h.serves(c, str(args[1]), 1)
}

// waitIDsNext: IDS.NEXT waits when the period's row must be created (a store call) or its
// tag, shaped or plain, would wait for a load like IDS.SEGMENT.
func waitIDsNext(h *Handler, c *resp.Conn, args [][]byte) bool { return waitIDsSegment(h, c, args) }

// waitIDsParse: IDS.PARSE of a tag whose shape this instance has not seen reads it from the
// store.
func waitIDsParse(h *Handler, c *resp.Conn, args [][]byte) bool {
	return !h.ids.KnowsShape(str(args[1]))
}

// waitIDsInfo: IDS.INFO of a tag of a kind not known here (not held, not known as shaped or
// ordered) reads the shape store.
func waitIDsInfo(h *Handler, c *resp.Conn, args [][]byte) bool {
	return !h.ids.Known(str(args[1]))
}

func waitIncrBy(h *Handler, c *resp.Conn, args [][]byte) bool {
	n, err := parseInt(args[2])
	return err == nil && n >= 1 && !h.serves(c, str(args[1]), n)
}

func waitIDsSegment(h *Handler, c *resp.Conn, args [][]byte) bool {
	if len(args) > 3 {
		return false // a syntax error
	}
	n := int64(1)
	if len(args) == 3 {
		var err error
		if n, err = parseInt(args[2]); err != nil || n < 1 {
			return false
		}
	}
	return !h.serves(c, str(args[1]), n)
}

// waitIDsSnowflake: IDS.SNOWFLAKE waits when the generator cannot issue its count now (the
// millisecond's sequence used up: it waits for the next one; the clock stepped back; the
// lease at its bound). A malformed call is answered at once.
func waitIDsSnowflake(h *Handler, c *resp.Conn, args [][]byte) bool {
	if h.snow == nil {
		return false
	}
	if n := len(args); n > 1 && (asciiEqualFold(args[n-1], "string") || asciiEqualFold(args[n-1], "friendly")) {
		args = args[:n-1]
	}
	n := int64(1)
	switch len(args) {
	case 1:
	case 2:
		m, err := h.batchCount(args[1])
		if err != nil {
			return false
		}
		n = int64(m)
	default:
		return false
	}
	if d := summing(c); d != nil {
		n = d.addSnow(n)
	}
	return h.snow.MayWait(n)
}

// waitExec: a transaction waits when any command it queued may (EXEC runs them back to back
// on this connection), and a long one (more than maxExecOnLoop commands) runs off the loop
// anyway: asking each of its commands would itself take the loop's time, and so would
// running them. An aborted transaction (EXECABORT) or EXEC without MULTI answers at once.
func waitExec(h *Handler, c *resp.Conn, args [][]byte) bool {
	st := state(c, false)
	if st == nil || !st.multi || st.dirty {
		return false
	}
	if len(st.queue) > maxExecOnLoop {
		return true
	}
	st.sum.on = true // the ID commands' flags add their counts (serves, summing)
	wait := false
	for _, q := range st.queue {
		if q.cmd.mayWait != nil && q.cmd.mayWait(h, c, q.args) {
			wait = true
			break
		}
	}
	st.sum.reset()
	return wait
}

// demand is what the ID commands a transaction queued take, summed while waitExec asks their
// flags: per segment tag (a shaped tag's row of the current period) and of the snowflake
// generator. Each command's flag asks whether the tag holds its count plus the counts of the
// commands before it: sixteen INCRBY tx 400000 each served alone but together needing several
// loads would otherwise run those loads on the loop (TestExecSumsDemand). It lives in
// the connection's state and is reused, so EXEC allocates only when a connection's
// transaction names more tags than any before it.
type demand struct {
	on   bool // waitExec is asking: serves and waitIDsSnowflake add to the sums
	tags []tagDemand
	snow int64
}

type tagDemand struct {
	tag string // args of the queue (copied at MULTI) or a shape's row name: valid while asked
	n   int64
}

// summing returns the transaction's demand while waitExec asks its queue, else nil (every
// command outside EXEC, with no allocation).
func summing(c *resp.Conn) *demand {
	if c == nil {
		return nil
	}
	if st, _ := c.State().(*connState); st != nil && st.sum.on {
		return &st.sum
	}
	return nil
}

// add records n more values of tag and returns the sum asked of it so far (saturating).
func (d *demand) add(tag string, n int64) int64 {
	for i := range d.tags {
		if e := &d.tags[i]; e.tag == tag {
			e.n = satAdd(e.n, n)
			return e.n
		}
	}
	d.tags = append(d.tags, tagDemand{tag, n})
	return n
}

func (d *demand) addSnow(n int64) int64 {
	d.snow = satAdd(d.snow, n)
	return d.snow
}

// reset ends a waitExec, keeping the slice but none of the strings it pointed to.
func (d *demand) reset() {
	clear(d.tags)
	d.on, d.tags, d.snow = false, d.tags[:0], 0
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// serves reports whether the segment row a request of tag takes from (ids.Router.WaitRow: a
// shaped tag's current period's row) holds n values now; while waitExec asks a transaction's
// queue, n plus the values the commands queued before this one take of it. An ordered tag led
// elsewhere (forwarded) and a shaped tag whose row is not made yet wait.
func (h *Handler) serves(c *resp.Conn, tag string, n int64) bool {
	d := summing(c)
	row, wait := h.ids.WaitRow(tag)
	if wait {
		// An ordered tag led elsewhere is forwarded (ordered.go): on the event loop the call
		// suspends the connection instead of waiting (forward); it waits in EXEC, and for the
		// first lease call of a tag just learned of (the router's WaitFirst). A shaped tag
		// whose row is not made yet waits.
		if t := h.ids.Ordered(tag); t != nil {
			return d == nil && c != nil && c.CanSuspend() && t.Stepped()
		}
		return false
	}
	if d != nil {
		n = d.add(row, n)
	}
	return h.seg.Serves(row, n)
}

var _ resp.Blocker = (*Handler)(nil)
