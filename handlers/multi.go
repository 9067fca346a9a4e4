package handlers

import (
	"fmt"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
)

// Transactions: MULTI queues commands, EXEC runs them back to back on this connection and
// replies with the array of their replies, DISCARD drops them. As in Redis, a command refused
// while queueing (unknown, wrong arity, NOAUTH) makes EXEC answer EXECABORT and run nothing,
// while an error of a queued command at run time (a bad count, NOTAG, UNAVAILABLE) is one
// element of EXEC's array and the other commands still run. leafd has no keys another
// client could change, so WATCH and UNWATCH only answer OK, and EXEC never returns the null
// of a failed WATCH. For ID commands a transaction is a batch, not an atomic reservation:
// other connections may take IDs of the same tag between two queued commands.

// maxQueuedBytes bounds what one connection's transaction holds (the arguments are copied,
// since the parser's buffer is reused). A command beyond it is refused and aborts the
// transaction.
const maxQueuedBytes = 4 << 20

// connState is the handler's per-connection state, made on the first command that needs it
// (MULTI, CLIENT TRACKING, NO-EVICT/NO-TOUCH) and dropped by RESET.
type connState struct {
	multi bool
	dirty bool // a command was refused while queueing: EXEC aborts
	exec  bool // EXEC runs its queue: a forwarded command joins no pipelined one
	// redirect: IDS.REDIRECT ON; fwdTags: the tags of a forwarded call (orderedfwd.go)
	redirect bool
	fwdTags  []*ordered.Tag
	fwdWait  *fwdWait // the connection's forwarded call while it is suspended
	queue    []queued
	qbytes   int
	track    tracking
	batch    batchCounts // the commands of the current batch, for their latency
	sum      demand      // EXEC's demand per tag, while waitExec asks the queue (mayblock.go)
}

type queued struct {
	cmd  *command
	args [][]byte
}

// state returns the connection's state, creating it when create is set.
func state(c *resp.Conn, create bool) *connState {
	st, _ := c.State().(*connState)
	if st == nil && create {
		st = &connState{}
		c.SetState(st)
	}
	return st
}

// enqueue copies args into the transaction's queue.
func (st *connState) enqueue(cmd *command, args [][]byte) error {
	size := 0
	for _, a := range args {
		size += len(a) + 24 // the slice header counts too
	}
	if st.qbytes+size > maxQueuedBytes {
		return replyError(fmt.Sprintf("LIMIT transaction too large (more than %d bytes queued); it will be discarded", maxQueuedBytes))
	}
	st.qbytes += size
	buf := make([]byte, 0, size)
	cp := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		cp[i] = buf[len(buf)-len(a) : len(buf) : len(buf)]
	}
	st.queue = append(st.queue, queued{cmd: cmd, args: cp})
	return nil
}

// endMulti leaves the transaction state and gives back the queue's memory.
func (st *connState) endMulti() {
	st.multi, st.dirty, st.queue, st.qbytes = false, false, nil, 0
}

func cmdMulti(h *Handler, c *resp.Conn, args [][]byte) error {
	st := state(c, true)
	if st.multi {
		return replyError("ERR MULTI calls can not be nested")
	}
	st.multi = true
	c.WriteSimple("OK")
	return nil
}

func cmdExec(h *Handler, c *resp.Conn, args [][]byte) error {
	st := state(c, false)
	if st == nil || !st.multi {
		return replyError("ERR EXEC without MULTI")
	}
	q, dirty := st.queue, st.dirty
	st.endMulti()
	if dirty {
		return replyError("EXECABORT Transaction discarded because of previous errors.")
	}
	c.WriteArray(len(q))
	st.exec = true
	defer func() { st.exec = false }()
	for _, e := range q {
		// The replies of a whole transaction are one reply: past the output limit the
		// connection is closed (resp), so stop building it.
		if c.OutputExceeded() {
			break
		}
		if e.cmd.write && st.track.caching && st.track.optin { // CLIENT CACHING YES queued before it
			c.WriteError(noCacheReply(e.cmd))
			continue
		}
		h.run(c, e.cmd, e.args)
	}
	return nil
}

func cmdDiscard(h *Handler, c *resp.Conn, args [][]byte) error {
	st := state(c, false)
	if st == nil || !st.multi {
		return replyError("ERR DISCARD without MULTI")
	}
	st.endMulti()
	c.WriteSimple("OK")
	return nil
}

func cmdWatch(h *Handler, c *resp.Conn, args [][]byte) error {
	if st := state(c, false); st != nil && st.multi {
		return replyError("ERR WATCH inside MULTI is not allowed")
	}
	c.WriteSimple("OK")
	return nil
}

func cmdUnwatch(h *Handler, c *resp.Conn, args [][]byte) error {
	c.WriteSimple("OK")
	return nil
}
