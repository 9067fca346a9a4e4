package snowflake

import "github.com/leafd/leafd/snowflake/internal/statefile"

// The layout record (snowflake/internal/statefile/layout.go): the data dir's snowflake.json, and
// the ZooKeeper source's /snowflake/<name>/layout node, record the epoch and bit widths of the
// IDs issued; a start with another layout is refused with ErrLayoutChanged.

// LayoutUser is implemented by a WorkerSource that records the layout (FileSource, StaticSource,
// the ZooKeeper source of snowflake/zk): New hands it the generator's layout, defaults filled
// in, before the first Acquire, which then checks it against the records.
type LayoutUser interface{ UseLayout(Layout) }

// UseLayout implements LayoutUser.
func (s *localSource) UseLayout(l Layout) {
	s.f.Lock()
	s.f.SetWant(LayoutRecord(l))
	s.f.Unlock()
}

// LayoutRecord is the record of l (defaults filled in) as the data dir and ZooKeeper keep it.
func LayoutRecord(l Layout) *statefile.LayoutRec {
	l = l.withDefaults()
	return &statefile.LayoutRec{EpochMs: l.EpochMs(), TimeBits: l.TimeBits, WorkerBits: l.WorkerBits, SeqBits: l.SeqBits}
}
