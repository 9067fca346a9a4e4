package handlers

import (
	"github.com/leafd/leafd/ids"
	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
)

// The RESP side of ORDERED tags: the router (package ids) takes their IDs here while this
// instance leads the tag, else names the leader; a command led elsewhere is forwarded (with
// the pipelined commands that can join it, orderedfwd.go) or redirected, and the leader's
// replies relayed.

// forwardCmd sends args, an ID command of an ordered tag led elsewhere, where fw says.
func (h *Handler) forwardCmd(c *resp.Conn, fw ids.Forward, args [][]byte) error {
	if c.Name() == ordered.ForwardClientName {
		// Forwarded by an instance that saw this one as the leader: never sent on again.
		return h.ids.TryAgain(fw.Tag, fw.Route, "is not led by this instance now")
	}
	if redirects(c) {
		return h.redirect(fw.Tag, fw.Route)
	}
	h.forward(c, fw.Tag, fw.Route, args)
	return nil
}

// writeReply relays a reply of the leader.
func writeReply(c *resp.Conn, r *ordered.Reply) {
	switch r.Kind {
	case ':':
		c.WriteInt(r.Int)
	case '-':
		c.WriteError(string(r.Str))
	case '+':
		c.WriteSimple(string(r.Str))
	case '$':
		c.WriteBulk(r.Str)
	case '*':
		c.WriteArray(len(r.Elems))
		for i := range r.Elems {
			writeReply(c, &r.Elems[i])
		}
	default:
		c.WriteNull()
	}
}

// orderedInfoFields is how many fields writeOrderedInfo adds to IDS.INFO.
const orderedInfoFields = 6

// writeOrderedInfo writes IDS.INFO's fields of an ordered tag.
func writeOrderedInfo(c *resp.Conn, t *ordered.Tag) {
	s := t.Status()
	c.WriteBulkString("ordered")
	c.WriteInt(1)
	c.WriteBulkString("leader")
	c.WriteBulkString(s.Leader)
	c.WriteBulkString("leader_here")
	c.WriteInt(b2i(s.Here))
	c.WriteBulkString("epoch")
	c.WriteInt(s.Epoch)
	c.WriteBulkString("lease_remaining_ms")
	c.WriteInt(s.Remaining.Milliseconds())
	c.WriteBulkString("forwarded")
	c.WriteInt(s.Forwarded)
}
