package handlers

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
)

// cmdIDsMarks: IDS.MARKS — every durable mark of this server, read from the marks file: tag →
// highest range end ever granted, for held tags and for tags not loaded since the start alike
// (a map in RESP3, a flat array in RESP2, by tag name); IDS.MARKS cursor [COUNT n] — one page,
// like IDS.TAGS: an array of the next cursor and a flat array of up to n (default 1000) tag,
// mark pairs, starting with cursor 0 and done when the next cursor is 0. The marks of retired
// tags and of old periods stay (they are the guard) and are paged like the others. The repair
// after a failover (leafd raise-max-id, leafd adopt --instances) pages through it. Neither form
// is cut off by the output limit (--max-output-buffer): the whole list that would pass it is a
// LIMIT error naming the cursor form, and a page is shortened to fit.
func cmdIDsMarks(h *Handler, c *resp.Conn, args [][]byte) error {
	if len(args) > 1 {
		return idsMarksPage(h, c, args)
	}
	marks, err := h.seg.Marks()
	if err != nil {
		return err
	}
	size := respHeaderLen(2 * len(marks))
	for _, m := range marks {
		size += markLen(m)
	}
	if room := c.OutputRoom(); size > room {
		return replyError(fmt.Sprintf("LIMIT IDS.MARKS reply of %d marks is %d bytes, over the output limit (%d bytes left of --max-output-buffer); "+
			"page through them with IDS.MARKS 0 COUNT 1000, then IDS.MARKS <next cursor> until the cursor is 0", len(marks), size, room))
	}
	c.WriteMap(len(marks))
	for _, m := range marks {
		c.WriteBulkString(m.Tag)
		c.WriteInt(m.End)
	}
	return nil
}

// cursorArgs parses "cmd cursor [COUNT n]" (args[1:]): the cursor is "0" or the hex of the
// last name a page returned; COUNT defaults to defaultTagsCount and is at most maxCount.
func cursorArgs(args [][]byte, cmd string, maxCount int64) (after string, count int, err error) {
	count = defaultTagsCount
	switch {
	case len(args) == 4 && strings.EqualFold(string(args[2]), "count"):
		n, err := parseInt(args[3])
		if err != nil {
			return "", 0, err
		}
		if n < 1 {
			return "", 0, replyError("ERR syntax error: COUNT must be at least 1")
		}
		count = int(min(n, maxCount))
	case len(args) != 2:
		return "", 0, errSyntax
	}
	if string(args[1]) != "0" {
		b, err := hex.DecodeString(string(args[1]))
		if err != nil || len(b) == 0 {
			return "", 0, replyError("ERR invalid cursor: start with " + cmd + " 0 and pass back the cursor each reply returns")
		}
		after = string(b)
	}
	return after, count, nil
}

// maxMarksCount bounds the marks one IDS.MARKS page reads, whatever its COUNT.
const maxMarksCount = 100_000

// idsMarksPage is IDS.MARKS cursor [COUNT n]; the cursor is the hex of the last tag returned,
// so a page costs the same at any number of marks (a seek in the marks file).
func idsMarksPage(h *Handler, c *resp.Conn, args [][]byte) error {
	after, count, err := cursorArgs(args, "IDS.MARKS", maxMarksCount)
	if err != nil {
		return err
	}
	page, err := h.seg.MarksAfter(after, count+1) // one more: is there a next page?
	if err != nil {
		return err
	}
	more := len(page) > count
	page = page[:min(len(page), count)]
	// Shorten the page to what fits the output room beside the header and the cursor.
	room := c.OutputRoom()
	size := respHeaderLen(2) + respHeaderLen(2*segment.MaxTagLen) + 2*segment.MaxTagLen + 2 + respHeaderLen(2*len(page))
	for j, m := range page {
		size += markLen(m)
		if size > room {
			page, more = page[:j], true
			break
		}
	}
	if len(page) == 0 && more {
		return replyError(fmt.Sprintf("LIMIT not even one mark fits the output limit (%d bytes left of --max-output-buffer); read the replies already sent or raise --max-output-buffer", room))
	}
	next := "0"
	if more {
		next = hex.EncodeToString([]byte(page[len(page)-1].Tag))
	}
	c.WriteArray(2)
	c.WriteBulkString(next)
	c.WriteArray(2 * len(page))
	for _, m := range page {
		c.WriteBulkString(m.Tag)
		c.WriteInt(m.End)
	}
	return nil
}

// markLen is the reply length of one mark: its tag as a bulk string and its end as an integer.
func markLen(m segment.Mark) int {
	return respHeaderLen(len(m.Tag)) + len(m.Tag) + 2 + respHeaderLen(int(m.End))
}
