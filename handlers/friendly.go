package handlers

import (
	"bytes"

	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/snowflake"
)

// snowLayout is the snowflake generator's layout (Leaf's when the generator does not say).
func (h *Handler) snowLayout() snowflake.Layout {
	if l, ok := h.snow.(interface{ Layout() snowflake.Layout }); ok {
		return l.Layout()
	}
	return snowflake.DefaultLayout()
}

// snowflakeArg reads IDS.DECODE's argument: a decimal ID, or its friendly form
// (20261201152415876-5-16).
func (h *Handler) snowflakeArg(b []byte) (int64, error) {
	if bytes.IndexByte(b, '-') > 0 {
		id, err := h.snowLayout().ParseFriendly(string(b))
		if err != nil {
			return 0, replyError("ERR not a snowflake ID of this server's layout (want an integer or yyyyMMddHHmmssSSS-worker-sequence)")
		}
		return id, nil
	}
	return parseInt(b)
}

// snowflakeFriendly: IDS.SNOWFLAKE [count] FRIENDLY — the IDs in their friendly form, bulk
// strings (yyyyMMddHHmmssSSS-worker-sequence, UTC); IDS.DECODE reads them back.
func (h *Handler) snowflakeFriendly(c *resp.Conn, args [][]byte) error {
	if len(args) > 2 {
		return errSyntax
	}
	if h.snow == nil {
		return replyError("NOWORKER snowflake mode is not enabled on this server")
	}
	l := h.snowLayout()
	var buf [48]byte
	if len(args) == 1 {
		id, err := h.snow.Next()
		if err != nil {
			return err
		}
		c.WriteBulk(l.AppendFriendly(buf[:0], id))
		return nil
	}
	n, err := h.batchCount(args[1])
	if err != nil {
		return err
	}
	p := idsPool.Get().(*[]int64)
	defer idsPool.Put(p)
	ids, err := h.snow.AppendIDs((*p)[:0], n)
	*p = ids[:0]
	if err != nil {
		return err
	}
	c.WriteArray(len(ids))
	for _, id := range ids {
		c.WriteBulk(l.AppendFriendly(buf[:0], id))
	}
	return nil
}
