package snowflake

import (
	"fmt"
	"time"
)

// DefaultEpochMs is Leaf's epoch, 2010-11-04T01:42:54.657Z, in Unix milliseconds.
const DefaultEpochMs int64 = 1288834974657

// Layout is the bit layout and epoch of the IDs. The zero value is Leaf's 41/10/12 layout with
// DefaultEpochMs. All instances of one worker-id domain must use the same layout and epoch.
type Layout struct {
	Epoch      time.Time // zero: DefaultEpochMs
	TimeBits   int       // all three zero: 41/10/12
	WorkerBits int
	SeqBits    int
}

// DefaultLayout returns Leaf's layout.
func DefaultLayout() Layout {
	return Layout{Epoch: time.UnixMilli(DefaultEpochMs).UTC(), TimeBits: 41, WorkerBits: 10, SeqBits: 12}
}

func (l Layout) withDefaults() Layout {
	d := DefaultLayout()
	if l.Epoch.IsZero() {
		l.Epoch = d.Epoch
	}
	if l.TimeBits == 0 && l.WorkerBits == 0 && l.SeqBits == 0 {
		l.TimeBits, l.WorkerBits, l.SeqBits = d.TimeBits, d.WorkerBits, d.SeqBits
	}
	return l
}

// Validate checks the bit counts (each ≥ 1, sum 63 — or at most JSBits, 53, for a
// JavaScript-safe layout whose IDs stay below 2^53) and that the epoch is not before 1970.
func (l Layout) Validate() error {
	l = l.withDefaults()
	if l.TimeBits < 1 || l.WorkerBits < 1 || l.SeqBits < 1 {
		return fmt.Errorf("snowflake: layout %d/%d/%d: each field needs at least 1 bit", l.TimeBits, l.WorkerBits, l.SeqBits)
	}
	if s := l.TimeBits + l.WorkerBits + l.SeqBits; s != 63 && s > JSBits {
		return fmt.Errorf("snowflake: layout %d/%d/%d: bits sum to %d, want 63 (or at most %d: JavaScript-safe)", l.TimeBits, l.WorkerBits, l.SeqBits, s, JSBits)
	}
	if l.Epoch.UnixMilli() < 0 {
		return fmt.Errorf("snowflake: epoch %v is before 1970", l.Epoch)
	}
	return nil
}

// EpochMs is the epoch in Unix milliseconds.
func (l Layout) EpochMs() int64 { return l.withDefaults().Epoch.UnixMilli() }

// MaxWorkerID is the largest worker id the layout can encode.
func (l Layout) MaxWorkerID() int64 { return 1<<l.withDefaults().WorkerBits - 1 }

// MaxSequence is the largest sequence number per millisecond.
func (l Layout) MaxSequence() int64 { return 1<<l.withDefaults().SeqBits - 1 }

// MaxTime is the last instant (a millisecond) the layout can encode.
func (l Layout) MaxTime() time.Time {
	l = l.withDefaults()
	return time.UnixMilli(l.EpochMs() + 1<<l.TimeBits - 1).UTC()
}

// Parts are the fields of an ID.
type Parts struct {
	TimestampMs int64     // Unix milliseconds
	Time        time.Time // the same instant, UTC
	WorkerID    int64
	Sequence    int64
}

// Decode splits id with this layout. It does not check that id was ever issued.
func (l Layout) Decode(id int64) Parts {
	l = l.withDefaults()
	ms := id>>(l.WorkerBits+l.SeqBits) + l.EpochMs()
	return Parts{
		TimestampMs: ms,
		Time:        time.UnixMilli(ms).UTC(),
		WorkerID:    id >> l.SeqBits & (1<<l.WorkerBits - 1),
		Sequence:    id & (1<<l.SeqBits - 1),
	}
}
