package handlers

import (
	"bytes"

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
