package snowflake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// The layout record. The time bound of a data dir (and of a state node) is in Unix
// milliseconds, but an ID encodes milliseconds since the epoch, shifted by the layout: a run
// with the epoch moved forward by D, or other bit widths, issues IDs that an earlier run issued.
// So the data dir's snowflake.json and the leafd-owned ZooKeeper node /snowflake/<name>/layout
// record the layout; a start with another one is refused. A file or a tree without the record
// (written before it existed) adopts the current layout.

// layoutRec is the recorded layout.
type layoutRec struct {
	EpochMs    int64 `json:"epoch_ms"`
	TimeBits   int   `json:"time_bits"`
	WorkerBits int   `json:"worker_bits"`
	SeqBits    int   `json:"seq_bits"`
}

func recOf(l Layout) *layoutRec {
	l = l.withDefaults()
	return &layoutRec{EpochMs: l.EpochMs(), TimeBits: l.TimeBits, WorkerBits: l.WorkerBits, SeqBits: l.SeqBits}
}

func (r layoutRec) String() string {
	return fmt.Sprintf("--snowflake-epoch %d --snowflake-bits %d,%d,%d", r.EpochMs, r.TimeBits, r.WorkerBits, r.SeqBits)
}

// ErrLayoutChanged (wrapped): the data dir or the worker-id domain was used with another
// epoch or bit layout. It fails the start.
var ErrLayoutChanged = errors.New("snowflake layout changed")

func layoutErr(where string, had, want *layoutRec) error {
	return fmt.Errorf("%w: %s was used with %s, this run has %s; IDs of the earlier runs would be issued again. "+
		"Start with the earlier --snowflake-epoch and --snowflake-bits, or use a new data dir AND a new worker-id domain "+
		"(another --zk-name, or worker ids no instance of the old layout uses)", ErrLayoutChanged, where, had, want)
}

// layoutSetter is implemented by the sources of this package: New hands them the generator's
// layout before the first Acquire, which then checks it against the records.
type layoutSetter interface{ setLayout(Layout) }

func (s *localSource) setLayout(l Layout) {
	s.f.mu.Lock()
	s.f.want = recOf(l)
	s.f.mu.Unlock()
}

func (s *ZKSource) setLayout(l Layout) {
	s.cache.mu.Lock()
	s.cache.want = recOf(l)
	s.cache.mu.Unlock()
}

// checkLayout (f.mu held) compares the layout recorded in st with the one this run uses and
// sets the layout every later write records: the recorded one when this run has none (a
// source used without a generator), else this run's (adopted by a file without a record).
func (f *localFile) checkLayout(st localState) error {
	switch {
	case f.want == nil:
		f.layout = st.Layout
	case st.Layout != nil && *st.Layout != *f.want:
		return layoutErr("data dir "+f.path, st.Layout, f.want)
	default:
		f.layout = f.want
	}
	return nil
}

// checkZKLayout creates /snowflake/<name>/layout with this run's layout, or compares it with
// the one there.
func (s *ZKSource) checkZKLayout(ctx context.Context) error {
	want := s.cache.want
	if want == nil {
		return nil
	}
	p := s.root + "/layout"
	b, _ := json.Marshal(want)
	for range 3 {
		_, err := call(ctx, func() (string, error) { return s.conn.Create(p, b, 0, zk.WorldACL(zk.PermAll)) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		got, err := call(ctx, func() ([]byte, error) {
			b, _, err := s.conn.Get(p)
			return b, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		var had layoutRec
		if err := json.Unmarshal(got, &had); err != nil {
			return fmt.Errorf("snowflake: layout node %s: bad JSON (%w); fix or remove it by hand", p, err)
		}
		if had != *want {
			return layoutErr("worker-id domain "+p, &had, want)
		}
		return nil
	}
	return fmt.Errorf("snowflake: layout node %s keeps changing", p)
}
