package handlers

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/shape"
)

// idsPool holds the scratch slices of batch replies so batches do not allocate.
var idsPool = sync.Pool{New: func() any { s := make([]int64, 0, 256); return &s }}

// cmdIncr: INCR tag — the next segment ID of tag.
func cmdIncr(h *Handler, c *resp.Conn, args [][]byte) error {
	id, fw, err := h.ids.Incr(str(args[1]))
	if err != nil {
		return err
	}
	if fw.Tag != nil {
		return h.forwardCmd(c, fw, args)
	}
	c.WriteInt(id)
	return nil
}

// cmdIncrBy: INCRBY tag n — n contiguous IDs; the reply is the highest, the caller owns
// [r-n+1, r].
func cmdIncrBy(h *Handler, c *resp.Conn, args [][]byte) error {
	n, err := parseInt(args[2])
	if err != nil {
		return err
	}
	if n < 1 {
		return replyError("LIMIT INCRBY count must be at least 1")
	}
	id, fw, err := h.ids.IncrBy(str(args[1]), n)
	if err != nil {
		return err
	}
	if fw.Tag != nil {
		return h.forwardCmd(c, fw, args)
	}
	c.WriteInt(id)
	return nil
}

// batchCount parses the optional count of IDS.SEGMENT / IDS.SNOWFLAKE.
func (h *Handler) batchCount(b []byte) (int, error) {
	n, err := parseInt(b)
	if err != nil {
		return 0, err
	}
	if n < 1 || n > int64(h.cfg.MaxBatch) {
		return 0, replyError(fmt.Sprintf("LIMIT count must be between 1 and %d (--max-batch); ask for more in several calls or raise --max-batch", h.cfg.MaxBatch))
	}
	return int(n), nil
}

// tagCount is the optional count of IDS.SEGMENT and IDS.NEXT (args: name, tag [, count]):
// 1 without it, else bounded by batchCount; more arguments are a syntax error.
func (h *Handler) tagCount(args [][]byte) (int, error) {
	switch len(args) {
	case 2:
		return 1, nil
	case 3:
		return h.batchCount(args[2])
	}
	return 0, errSyntax
}

// cmdIDsSegment: IDS.SEGMENT tag [count] — an array of count IDs, strictly increasing.
func cmdIDsSegment(h *Handler, c *resp.Conn, args [][]byte) error {
	n, err := h.tagCount(args)
	if err != nil {
		return err
	}
	p := idsPool.Get().(*[]int64)
	defer idsPool.Put(p)
	ids, fw, err := h.ids.Segment((*p)[:0], str(args[1]), n)
	*p = ids[:0]
	if err != nil {
		return err
	}
	if fw.Tag != nil {
		return h.forwardCmd(c, fw, args)
	}
	c.WriteInts(ids)
	return nil
}

// cmdIDsSnowflake: IDS.SNOWFLAKE [count] [STRING|FRIENDLY] — one ID as an integer, or an array of
// count. With STRING the IDs are bulk strings of their decimal digits: for clients that turn
// integer replies into floating-point numbers (JavaScript, Lua 5.1) and would round an ID
// above 2^53 (README "Client notes").
func cmdIDsSnowflake(h *Handler, c *resp.Conn, args [][]byte) error {
	form := snowInt
	if len(args) > 1 {
		switch last := args[len(args)-1]; {
		case bytes.EqualFold(last, []byte("string")):
			form = snowString
		case bytes.EqualFold(last, []byte("friendly")):
			form = snowFriendly
		}
		if form != snowInt {
			args = args[:len(args)-1]
		}
	}
	if len(args) > 2 {
		return errSyntax
	}
	if h.snow == nil {
		return replyError("NOWORKER snowflake mode is not enabled on this server")
	}
	if len(args) == 1 {
		id, err := h.snow.Next()
		if err != nil {
			return err
		}
		h.writeSnowflake(c, id, form)
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
	if form == snowInt {
		c.WriteInts(ids)
		return nil
	}
	c.WriteArray(len(ids))
	for _, id := range ids {
		h.writeSnowflake(c, id, form)
	}
	return nil
}

// The reply forms of IDS.SNOWFLAKE: integers, their digits as bulk strings (STRING), or the
// friendly form yyyyMMddHHmmssSSS-worker-sequence (FRIENDLY, UTC; IDS.DECODE reads it back).
const (
	snowInt = iota
	snowString
	snowFriendly
)

func (h *Handler) writeSnowflake(c *resp.Conn, id int64, form int) {
	if form == snowFriendly {
		var buf [48]byte
		c.WriteBulk(h.snowLayout().AppendFriendly(buf[:0], id))
		return
	}
	writeID(c, id, form == snowString)
}

// writeID writes an ID as an integer reply, or as a bulk string of its digits.
func writeID(c *resp.Conn, id int64, asString bool) {
	if !asString {
		c.WriteInt(id)
		return
	}
	var b [20]byte
	c.WriteBulk(strconv.AppendInt(b[:0], id, 10))
}

// cmdIDsDecode: IDS.DECODE id — the fields of a snowflake ID under this server's layout.
func cmdIDsDecode(h *Handler, c *resp.Conn, args [][]byte) error {
	if h.snow == nil {
		return replyError("NOWORKER snowflake mode is not enabled on this server")
	}
	id, err := h.snowflakeArg(args[1])
	if err != nil {
		return err
	}
	if id < 0 {
		return replyError("ERR snowflake IDs are not negative")
	}
	// An ID whose time part is 0 (below 2^(worker+sequence bits)) was made at the epoch's
	// millisecond: no snowflake ID of this server is that small, a segment ID (INCR) is.
	l := h.snow.Info().Layout
	if least := int64(1) << (l.WorkerBits + l.SeqBits); id < least {
		return replyError(fmt.Sprintf("ERR %d is not a snowflake ID of this server: every one is at least %d (its time part would be 0, the epoch %s itself); "+
			"segment IDs (INCR, IDS.SEGMENT) are counters and have no time to decode", id, least, l.Epoch.UTC().Format("2006-01-02T15:04:05.000Z07:00")))
	}
	p := h.snow.Decode(id)
	c.WriteMap(6)
	c.WriteBulkString("id")
	c.WriteInt(id)
	c.WriteBulkString("friendly")
	var fb [48]byte
	c.WriteBulk(h.snowLayout().AppendFriendly(fb[:0], id))
	c.WriteBulkString("timestamp_ms")
	c.WriteInt(p.TimestampMs)
	c.WriteBulkString("time")
	c.WriteBulkString(p.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	c.WriteBulkString("worker_id")
	c.WriteInt(p.WorkerID)
	c.WriteBulkString("sequence")
	c.WriteInt(p.Sequence)
	return nil
}

// cmdIDsInfo: IDS.INFO tag — the tag's double buffer (Leaf's /cache page).
func cmdIDsInfo(h *Handler, c *resp.Conn, args [][]byte) error {
	info, err := h.ids.Info(str(args[1]))
	if err != nil {
		return err
	}
	extra := 0
	if info.Shape != nil {
		extra = shapeInfoFields
	}
	if info.Ordered != nil {
		extra += orderedInfoFields
	}
	if !info.Held { // a shaped or ordered tag not held here: its shape, or its lease
		c.WriteMap(1 + extra)
		c.WriteBulkString("tag")
		if info.Shape != nil {
			c.WriteBulkString(info.Shape.Tag)
			writeShapeInfo(c, info.Shape)
		} else {
			c.WriteBulkString(info.Ordered.Name)
			writeOrderedInfo(c, info.Ordered)
		}
		return nil
	}
	in := info.Seg
	seg := func(name string, s segment.SegmentInfo) {
		c.WriteBulkString(name)
		if !s.Loaded {
			c.WriteNull()
			return
		}
		c.WriteMap(4)
		c.WriteBulkString("start")
		c.WriteInt(s.Start)
		c.WriteBulkString("end")
		c.WriteInt(s.End)
		c.WriteBulkString("next")
		c.WriteInt(s.Next)
		c.WriteBulkString("remaining")
		c.WriteInt(s.Remaining)
	}
	c.WriteMap(12 + extra)
	c.WriteBulkString("tag")
	c.WriteBulkString(in.Tag)
	c.WriteBulkString("init_ok")
	c.WriteInt(b2i(in.InitOK))
	seg("current", in.Current)
	seg("next", in.Next)
	c.WriteBulkString("next_ready")
	c.WriteInt(b2i(in.NextReady))
	c.WriteBulkString("loading")
	c.WriteInt(b2i(in.Loading))
	c.WriteBulkString("step")
	c.WriteInt(in.Step)
	c.WriteBulkString("min_step")
	c.WriteInt(in.MinStep)
	c.WriteBulkString("high_water_mark")
	c.WriteInt(in.Mark)
	c.WriteBulkString("last_refill")
	if in.LastRefill.IsZero() {
		c.WriteBulkString("")
	} else {
		c.WriteBulkString(in.LastRefill.UTC().Format(time.RFC3339Nano))
	}
	c.WriteBulkString("last_error")
	c.WriteBulkString(publicLoadError(in.LastError))
	c.WriteBulkString("max_incrby")
	c.WriteInt(in.MaxCount)
	if info.Shape != nil {
		writeShapeInfo(c, info.Shape)
	}
	if info.Ordered != nil {
		writeOrderedInfo(c, info.Ordered)
	}
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// defaultTagsCount is the page size of IDS.TAGS cursor without COUNT.
const defaultTagsCount = 1000

// cmdIDsTags: IDS.TAGS — the tags this server holds, sorted, as one array; IDS.TAGS cursor
// [COUNT n] — one page, like SCAN: an array of the next cursor and up to n tags (default
// 1000), starting with cursor 0 and done when the next cursor is 0. The cursor is opaque (the
// hex of the last tag returned), so a tag held through the whole iteration is returned exactly
// once, whatever is added or retired meanwhile. Neither form is ever cut off by the output
// limit (--max-output-buffer): the whole list that would pass it is a LIMIT error naming the
// cursor form, and a page is shortened to fit.
func cmdIDsTags(h *Handler, c *resp.Conn, args [][]byte) error {
	tags := h.seg.Tags()
	room := c.OutputRoom()
	if len(args) == 1 {
		size := respHeaderLen(len(tags))
		for _, t := range tags {
			size += respHeaderLen(len(t)) + len(t) + 2
		}
		if size > room {
			return replyError(fmt.Sprintf("LIMIT IDS.TAGS reply of %d tags is %d bytes, over the output limit (%d bytes left of --max-output-buffer); "+
				"page through them with IDS.TAGS 0 COUNT 1000, then IDS.TAGS <next cursor> until the cursor is 0", len(tags), size, room))
		}
		c.WriteArray(len(tags))
		for _, t := range tags {
			c.WriteBulkString(t)
		}
		return nil
	}
	after, count, err := cursorArgs(args, "IDS.TAGS", int64(len(tags)+1))
	if err != nil {
		return err
	}
	i, _ := slices.BinarySearch(tags, after)
	if i < len(tags) && tags[i] == after {
		i++
	}
	page := tags[i:min(len(tags), i+count)]
	// Shorten the page to what fits the output room beside the header and the cursor.
	size := respHeaderLen(2) + respHeaderLen(2*segment.MaxTagLen) + 2*segment.MaxTagLen + 2 + respHeaderLen(len(page))
	for j, t := range page {
		size += respHeaderLen(len(t)) + len(t) + 2
		if size > room {
			page = page[:j]
			break
		}
	}
	if len(page) == 0 && i < len(tags) {
		return replyError(fmt.Sprintf("LIMIT not even one tag fits the output limit (%d bytes left of --max-output-buffer); read the replies already sent or raise --max-output-buffer", room))
	}
	next := "0"
	if i+len(page) < len(tags) {
		next = hex.EncodeToString([]byte(page[len(page)-1]))
	}
	c.WriteArray(2)
	c.WriteBulkString(next)
	c.WriteArray(len(page))
	for _, t := range page {
		c.WriteBulkString(t)
	}
	return nil
}

// respHeaderLen is the length of a RESP line holding n: a type byte, the decimal digits and
// CRLF (an integer reply, or the header of a bulk string, array or map). An upper bound for
// a RESP3 map header of n/2 entries too.
func respHeaderLen(n int) int {
	d := 1
	if n < 0 {
		d++
		n = -n
	}
	for ; n >= 10; n /= 10 {
		d++
	}
	return 1 + d + 2
}

// cmdIDsRetire: IDS.RETIRE tag — drop the tag from this server (the rest of its segments is a
// gap); 1 when it was held, else 0. Its regression mark stays, so no re-creation of the tag
// can reissue its IDs.
func cmdIDsRetire(h *Handler, c *resp.Conn, args [][]byte) error {
	c.WriteInt(b2i(h.seg.Retire(string(args[1]))))
	return nil
}

// maxStep is IDS.CREATE's bound on STEP: --max-step, or the segment core's default.
func (h *Handler) maxStep() int64 {
	if h.cfg.MaxStep > 0 {
		return h.cfg.MaxStep
	}
	return segment.DefaultConfig().MaxStep
}

// maxStoredStep is the largest leaf_alloc.step (an int(11) column).
const maxStoredStep = 1<<31 - 1

// cmdIDsCreate: IDS.CREATE tag [STEP n] [START n] [DESC text] [ORDERED].
func cmdIDsCreate(h *Handler, c *resp.Conn, args [][]byte) error {
	if h.cfg.DisableCreate {
		return replyError("NOPERM IDS.CREATE is disabled on this server (--allow-create=false); ask the operator to create the tag")
	}
	t := segment.Tag{Name: string(args[1])}
	var sp shape.Spec // FORMAT, RESET, TZ, OPAQUE: a shaped tag (package ids)
	for i := 2; i < len(args); i += 2 {
		opt := strings.ToLower(string(args[i]))
		if opt == "opaque" { // a flag: no value
			sp.Opaque = true
			i--
			continue
		}
		if opt == "ordered" { // a flag: strictly increasing across instances (package ids)
			t.Ordered = true
			i--
			continue
		}
		if i+1 >= len(args) {
			return errSyntax
		}
		switch opt {
		case "format":
			sp.Format = string(args[i+1])
		case "reset":
			sp.Reset = strings.ToLower(string(args[i+1]))
		case "tz":
			sp.TZ = string(args[i+1])
		case "step":
			n, err := parseInt(args[i+1])
			if err != nil {
				return err
			}
			if n < 1 || n > maxStoredStep {
				return replyError("LIMIT STEP must be between 1 and " + strconv.Itoa(maxStoredStep))
			}
			if maxStep := h.maxStep(); n > maxStep {
				return replyError(fmt.Sprintf("LIMIT STEP %d is above --max-step (%d), the largest segment this server loads; use a smaller STEP or raise --max-step", n, maxStep))
			}
			t.Step = n
		case "start":
			n, err := parseInt(args[i+1])
			if err != nil {
				return err
			}
			if n < 1 {
				return replyError("LIMIT START must be at least 1")
			}
			t.MaxID = n
		case "desc":
			if len(args[i+1]) > 256 {
				return replyError("LIMIT DESC is at most 256 bytes")
			}
			t.Description = string(args[i+1])
		default:
			return errSyntax
		}
	}
	if err := h.ids.Create(t, sp); err != nil {
		return err
	}
	c.WriteSimple("OK")
	return nil
}
