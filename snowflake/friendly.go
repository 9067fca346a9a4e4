package snowflake

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// JSBits is the widest JavaScript-safe layout: an ID below 2^53 is read exactly by a
// JavaScript number (Number.MAX_SAFE_INTEGER = 2^53 − 1) and by any double.
const JSBits = 53

// JSLayout is the JavaScript-safe layout leafd proposes (CosId's "safe JavaScript" widths):
// 41 time bits (69 years from the epoch: to 2080 from Leaf's epoch), 3 worker bits (8 workers)
// and 9 sequence bits (512 IDs per millisecond per worker).
func JSLayout() Layout {
	return Layout{Epoch: time.UnixMilli(DefaultEpochMs).UTC(), TimeBits: 41, WorkerBits: 3, SeqBits: 9}
}

// ErrFriendly: a string is not the friendly form of an ID of this layout.
var ErrFriendly = errors.New("snowflake: not a friendly ID")

const friendlyTime = "20060102150405.000"

// AppendFriendly appends the friendly form of id: its UTC time to the millisecond, the worker
// id and the sequence, "20261201152415876-5-16" (yyyyMMddHHmmssSSS-worker-sequence). It
// allocates nothing beyond dst's growth.
func (l Layout) AppendFriendly(dst []byte, id int64) []byte {
	p := l.Decode(id)
	n := len(dst)
	dst = p.Time.AppendFormat(dst, friendlyTime)
	// Drop the '.' of the layout's fraction: 14 digits, '.', 3 digits.
	copy(dst[n+14:], dst[n+15:])
	dst = dst[:len(dst)-1]
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, p.WorkerID, 10)
	dst = append(dst, '-')
	return strconv.AppendInt(dst, p.Sequence, 10)
}

// ParseFriendly is the inverse of AppendFriendly: the ID whose friendly form is s. The time
// must lie within the layout, the worker id and sequence within their widths.
func (l Layout) ParseFriendly(s string) (int64, error) {
	l = l.withDefaults()
	ts, rest, ok := strings.Cut(s, "-")
	ws, qs, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || len(ts) != 17 {
		return 0, ErrFriendly
	}
	t, err := time.ParseInLocation("20060102150405", ts[:14], time.UTC)
	if err != nil {
		return 0, ErrFriendly
	}
	msPart, err := strconv.Atoi(ts[14:])
	if err != nil || ts[14] == '+' || ts[14] == '-' {
		return 0, ErrFriendly
	}
	w, err1 := strconv.ParseInt(ws, 10, 64)
	q, err2 := strconv.ParseInt(qs, 10, 64)
	if err1 != nil || err2 != nil || w < 0 || q < 0 || w > l.MaxWorkerID() || q > l.MaxSequence() ||
		strconv.FormatInt(w, 10) != ws || strconv.FormatInt(q, 10) != qs {
		return 0, ErrFriendly
	}
	d := t.UnixMilli() + int64(msPart) - l.EpochMs()
	if d < 0 || d > 1<<l.TimeBits-1 {
		return 0, ErrFriendly
	}
	return d<<(l.WorkerBits+l.SeqBits) | w<<l.SeqBits | q, nil
}
