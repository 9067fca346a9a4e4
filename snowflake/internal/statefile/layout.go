package statefile

import (
	"errors"
	"fmt"
)

// The layout record. The time bound of a data dir (and of a state node) is in Unix
// milliseconds, but an ID encodes milliseconds since the epoch, shifted by the layout: a run
// with the epoch moved forward by D, or other bit widths, issues IDs that an earlier run issued.
// So the data dir's snowflake.json and the leafd-owned ZooKeeper node /snowflake/<name>/layout
// record the layout; a start with another one is refused. A file or a tree without the record
// (written before it existed) adopts the current layout.

// LayoutRec is the recorded layout.
type LayoutRec struct {
	EpochMs    int64 `json:"epoch_ms"`
	TimeBits   int   `json:"time_bits"`
	WorkerBits int   `json:"worker_bits"`
	SeqBits    int   `json:"seq_bits"`
}

func (r LayoutRec) String() string {
	return fmt.Sprintf("--snowflake-epoch %d --snowflake-bits %d,%d,%d", r.EpochMs, r.TimeBits, r.WorkerBits, r.SeqBits)
}

// ErrLayoutChanged (wrapped): the data dir or the worker-id domain was used with another
// epoch or bit layout. It fails the start.
var ErrLayoutChanged = errors.New("snowflake layout changed")

// LayoutErr is the ErrLayoutChanged error for where, recorded with had, started with want.
func LayoutErr(where string, had, want *LayoutRec) error {
	return fmt.Errorf("%w: %s was used with %s, this run has %s; IDs of the earlier runs would be issued again. "+
		"Start with the earlier --snowflake-epoch and --snowflake-bits, or use a new data dir AND a new worker-id domain "+
		"(another --zk-name, or worker ids no instance of the old layout uses)", ErrLayoutChanged, where, had, want)
}

// CheckLayout (lock held) compares the layout recorded in st with the one this run uses and
// sets the layout every later write records: the recorded one when this run has none (a
// source used without a generator), else this run's (adopted by a file without a record).
func (f *File) CheckLayout(st State) error {
	switch {
	case f.want == nil:
		f.layout = st.Layout
	case st.Layout != nil && *st.Layout != *f.want:
		return LayoutErr("data dir "+f.path, st.Layout, f.want)
	default:
		f.layout = f.want
	}
	return nil
}
