package handlers

import (
	"time"

	"github.com/leafd/leafd/ids"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/shape"
)

// The commands of ID shapes (docs/SHAPES.md); the shapes themselves live behind the router
// (package ids).

// cmdIDsNext: IDS.NEXT tag [count] — the tag's next ID(s) as bulk strings: formatted for a
// shaped tag, the decimal integer for a plain one (for clients that read integers as
// floating point). Without count one bulk string, with count an array (IDS.SEGMENT's bound).
func cmdIDsNext(h *Handler, c *resp.Conn, args [][]byte) error {
	n, err := h.tagCount(args)
	if err != nil {
		return err
	}
	p := idsPool.Get().(*[]int64)
	defer idsPool.Put(p)
	b, fw, err := h.ids.Next((*p)[:0], str(args[1]), n)
	*p = b.IDs[:0]
	if err != nil {
		return err
	}
	if fw.Tag != nil {
		return h.forwardCmd(c, fw, args)
	}
	var buf [shape.MaxTemplateLen + 8]byte
	if len(args) == 3 {
		c.WriteArray(len(b.IDs))
	}
	for _, id := range b.IDs {
		out, err := b.Append(buf[:0], id)
		if err != nil {
			if len(args) == 3 { // the array header is out: end it with error entries
				c.WriteError(h.errorReply(err))
				continue
			}
			return err
		}
		c.WriteBulk(out)
	}
	return nil
}

// cmdIDsParse: IDS.PARSE tag id — the counter and period an ID of a shaped tag came from
// (map in RESP3, flat array in RESP2); BADID for a string the tag could not have issued.
func cmdIDsParse(h *Handler, c *resp.Conn, args [][]byte) error {
	got, err := h.ids.Parse(str(args[1]), string(args[2]))
	if err != nil {
		return err
	}
	c.WriteMap(4)
	c.WriteBulkString("counter")
	c.WriteInt(got.Counter)
	c.WriteBulkString("period")
	c.WriteBulkString(got.Period.Key)
	c.WriteBulkString("period_start")
	if got.Period.Start.IsZero() {
		c.WriteBulkString("")
	} else {
		c.WriteBulkString(got.Period.Start.Format(time.RFC3339))
	}
	c.WriteBulkString("row")
	c.WriteBulkString(got.Period.Row)
	return nil
}

// cmdIDsPrune: IDS.PRUNE tag period — delete the rows of the shaped tag's periods before
// period; the number of rows deleted (ids.Router.Prune).
func cmdIDsPrune(h *Handler, c *resp.Conn, args [][]byte) error {
	n, err := h.ids.Prune(str(args[1]), string(args[2]))
	if err != nil {
		return err
	}
	c.WriteInt(int64(n))
	return nil
}

// shapeInfoFields is how many fields writeShapeInfo adds to IDS.INFO.
const shapeInfoFields = 7

func writeShapeInfo(c *resp.Conn, s *ids.ShapeInfo) {
	c.WriteBulkString("format")
	c.WriteBulkString(s.Spec.Format)
	c.WriteBulkString("reset")
	c.WriteBulkString(s.Spec.Reset)
	c.WriteBulkString("tz")
	c.WriteBulkString(s.Spec.TZ)
	c.WriteBulkString("opaque")
	c.WriteInt(b2i(s.Spec.Opaque))
	c.WriteBulkString("capacity")
	c.WriteInt(s.Capacity)
	c.WriteBulkString("period")
	c.WriteBulkString(s.Period)
	c.WriteBulkString("row")
	c.WriteBulkString(s.Row)
}
