package handlers

import (
	"bytes"
	"fmt"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
)

// Forwarding a client's pipeline (docs/SEGMENT.md, "Followers and the leader"). A command of
// an ordered tag led elsewhere is forwarded together with the commands that follow it in the
// connection's read buffer and go to the same leader (resp.Conn.PeekNext): one call of the
// Forwarder, its requests back to back on one connection to the leader, in one write. The
// leader runs them in that order on that connection, so their replies are as if sent one by
// one, and they cost one round trip. Every joined request was in the buffer before any of
// the replies was written, so each was sent before the client saw any of them: concurrent
// requests, and the leader's order is a valid one. The first command that cannot join (any
// other command, another leader, a tag served here) ends the group and runs as usual after
// it.

// maxJoined bounds the commands one forwarded call carries; maxJoinedIDs the IDs they ask
// for (their replies are written as one batch, under the connection's output limit).
const (
	maxJoined    = 256
	maxJoinedIDs = 4096
)

// forward sends args (and the pipelined commands that can join it) to the leader r names and
// writes every reply, in order; an unreachable leader answers each of them UNAVAILABLE. On an
// event loop the call does not wait: the connection is suspended (resp.Conn.Suspend), the
// call goes out on the loop's own connection to the leader (ordered.LoopForwarder) and the
// replies are written when the leader's answer is in (fwdWait.Resumed), on the loop again.
func (h *Handler) forward(c *resp.Conn, t *ordered.Tag, r ordered.Route, args [][]byte) {
	st := state(c, true)
	call := h.fwd.NewCall()
	if raw := c.RawCommand(args); raw != nil && !st.exec {
		call.AddRaw(raw) // the client's bytes, sent on as they are
	} else {
		call.Add(args)
	}
	tags := append(st.fwdTags[:0], t)
	if !st.exec { // EXEC's queue is one reply: nothing joins it
		tags = h.joinPipeline(c, st, call, tags, r.Leader, joinCount(args))
	}
	st.fwdTags = tags
	if !st.exec && c.CanSuspend() {
		w := st.fwdWait
		if w == nil {
			w = &fwdWait{h: h, st: st, resume: c.Resume, resumeOnLoop: c.ResumeOnLoop}
			st.fwdWait = w
		}
		w.call, w.route = call, r
		if lf, _ := c.LoopTask().(*ordered.LoopForwarder); lf != nil {
			// The loop's own connection to the leader: the replies come in on the loop.
			call.Notify = w.resumeOnLoop
			c.Suspend(w)
			lf.Start(r.Leader, call)
			return
		}
		call.Notify = w.resume
		c.Suspend(w)
		h.fwd.Start(r.Leader, call)
		return
	}
	h.fwd.Run(r.Leader, call)
	h.forwarded(c, st, call, r)
}

// fwdWait is a connection's forwarded call in flight while the connection is suspended (one
// per connection, reused).
type fwdWait struct {
	h            *Handler
	st           *connState
	resume       func() // the connection's Resume, bound once
	resumeOnLoop func() // its ResumeOnLoop (the loop's LoopForwarder notifies on the loop)
	call         *ordered.Call
	route        ordered.Route
}

// LoopTask gives each event loop its own connections to the leaders (resp.LoopTasker): the
// forwarded calls of the loop's connections go out and come back on the loop.
func (h *Handler) LoopTask(l *resp.Loop) resp.LoopTask {
	if h.fwd == nil {
		return nil
	}
	if lf := h.fwd.NewLoopForwarder(l); lf != nil {
		return lf
	}
	return nil
}

var _ resp.LoopTasker = (*Handler)(nil)

// Resumed writes the replies of the call (resp.Resumer).
func (w *fwdWait) Resumed(c *resp.Conn) {
	call := w.call
	w.call = nil
	w.h.forwarded(c, w.st, call, w.route)
}

// forwarded writes the replies of a finished call (or UNAVAILABLE for each of its requests)
// and releases it.
func (h *Handler) forwarded(c *resp.Conn, st *connState, call *ordered.Call, r ordered.Route) {
	tags := st.fwdTags
	if call.Err != nil {
		for _, jt := range tags {
			c.WriteError(h.errorReply(h.ids.ForwardFailed(jt, r, call.Err)))
		}
	} else {
		if call.Raw != nil {
			c.WriteRaw(call.Raw) // every reply as the leader sent it: the same in RESP2 and RESP3
		} else {
			for i := range call.Replies {
				writeReply(c, &call.Replies[i])
			}
		}
		for i := 0; i < len(tags); { // one count per run of the same tag (a pipeline's)
			j := i + 1
			for j < len(tags) && tags[j] == tags[i] {
				j++
			}
			tags[i].Forwarded.Add(int64(j - i))
			i = j
		}
		h.ids.Forwarded(int64(len(tags)))
	}
	h.fwd.Release(call)
	clear(tags)
	st.fwdTags = tags[:0]
}

// joinPipeline adds to call the commands after the running one that go to leader too, and
// takes them from the connection; tags gets each one's tag. ids is what the call asks so far.
// A command named as the one before it, of the same tag (the common pipeline), reuses that
// one's command and tag look-ups: nothing runs between them that could change either. A
// command the same as the one joined before it, byte for byte (a pipeline of one command
// repeated), is not even parsed again: same command, tag and count.
func (h *Handler) joinPipeline(c *resp.Conn, st *connState, call *ordered.Call, tags []*ordered.Tag, leader string, ids int64) []*ordered.Tag {
	if !h.mayJoin(c, st) {
		return tags
	}
	var lastName, lastTag, lastRaw []byte
	var lastCmd *command
	var lastCnt int64
	for len(tags) < maxJoined {
		if lastRaw != nil && c.NextIs(lastRaw) {
			if ids += lastCnt; ids > maxJoinedIDs {
				break
			}
			call.AddRaw(lastRaw)
			c.TakeNext(len(lastRaw))
			st.batch.add(lastCmd.idx, len(h.lat))
			tags = append(tags, tags[len(tags)-1])
			continue
		}
		args, n, ok := c.PeekNext()
		if !ok || len(args) < 2 {
			break
		}
		cmd, t := lastCmd, tags[len(tags)-1]
		if lastCmd == nil || !bytes.Equal(args[0], lastName) || !bytes.Equal(args[1], lastTag) {
			cmd, t = h.joinable(args)
			if t == nil {
				break
			}
			// Another leader, or none, or served here (""); a tag already in the call was
			// routed to leader just before.
			if t != tags[len(tags)-1] && t.Route().Leader != leader {
				break
			}
			lastName, lastTag, lastCmd = args[0], args[1], cmd
		}
		cnt := joinArgs(cmd, args)
		if cnt < 1 {
			break
		}
		if ids += cnt; ids > maxJoinedIDs {
			break
		}
		lastRaw, lastCnt = c.NextRaw(n), cnt
		call.AddRaw(lastRaw)
		c.TakeNext(n)
		st.batch.add(cmd.idx, len(h.lat))
		tags = append(tags, t)
	}
	return tags
}

// mayJoin reports whether commands may join a forwarded call on c: ServeRESP would run an ID
// command as it stands (authenticated, no transaction, no CLIENT CACHING refusal).
func (h *Handler) mayJoin(c *resp.Conn, st *connState) bool {
	return c.Authed() && !h.cfg.NoSegment && !st.multi && !st.redirect && !(st.track.caching && st.track.optin)
}

// joinable returns the command and the ordered tag of a command that may join a forwarded
// call: an ID command of an ordered tag (joinPipeline checks its route and joinArgs its
// arguments); a nil tag otherwise.
func (h *Handler) joinable(args [][]byte) (*command, *ordered.Tag) {
	cmd := h.lookup(args[0])
	if cmd == nil || !cmd.routed {
		return nil, nil
	}
	t := h.ids.Ordered(str(args[1]))
	if t == nil {
		return nil, nil
	}
	return cmd, t
}

// joinArgs is the IDs an ID command cmd asks for with args, 0 when ServeRESP would refuse
// its arity or its count is malformed.
func joinArgs(cmd *command, args [][]byte) int64 {
	if (cmd.arity > 0 && len(args) != cmd.arity) || (cmd.arity < 0 && len(args) < -cmd.arity) {
		return 0
	}
	if cmd.name == "incr" && len(args) != 2 {
		return 0
	}
	return joinCount(args)
}

// joinCount is the IDs an ID command asks for: 1, or its count argument (0 when malformed or
// with more arguments than a count).
func joinCount(args [][]byte) int64 {
	switch len(args) {
	case 2:
		return 1
	case 3:
		n, err := parseInt(args[2])
		if err != nil || n < 1 {
			return 0
		}
		return n
	}
	return 0
}

// redirect is the answer to a client that asked for redirects (IDS.REDIRECT ON) instead of
// a forward: the leader's address, second word, as Redis Cluster's MOVED gives it.
func (h *Handler) redirect(t *ordered.Tag, r ordered.Route) error {
	return replyError(fmt.Sprintf("LEADER %s ordered tag '%s' is served by its leader there", r.Leader, t.Name))
}

// redirects reports whether c asked for LEADER redirects.
func redirects(c *resp.Conn) bool {
	st, _ := c.State().(*connState)
	return st != nil && st.redirect
}

// cmdIDsRedirect: IDS.REDIRECT ON|OFF — with ON, a command of an ordered tag led by another
// instance is answered "LEADER host:port ..." instead of being forwarded there (RESET and
// new connections: OFF).
func cmdIDsRedirect(h *Handler, c *resp.Conn, args [][]byte) error {
	var on bool
	switch {
	case asciiEqualFold(args[1], "on"):
		on = true
	case asciiEqualFold(args[1], "off"):
	default:
		return errSyntax
	}
	state(c, true).redirect = on
	c.WriteSimple("OK")
	return nil
}
