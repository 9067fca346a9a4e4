package snowflake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// layoutSetter is implemented by the sources of this package: New hands them the generator's
// layout before the first Acquire, which then checks it against the records.
type layoutSetter interface{ setLayout(Layout) }

func (s *localSource) setLayout(l Layout) {
	s.f.Lock()
	s.f.SetWant(recOf(l))
	s.f.Unlock()
}

func (s *ZKSource) setLayout(l Layout) {
	s.cache.Lock()
	s.cache.SetWant(recOf(l))
	s.cache.Unlock()
}

func recOf(l Layout) *statefile.LayoutRec {
	l = l.withDefaults()
	return &statefile.LayoutRec{EpochMs: l.EpochMs(), TimeBits: l.TimeBits, WorkerBits: l.WorkerBits, SeqBits: l.SeqBits}
}

// checkZKLayout creates /snowflake/<name>/layout with this run's layout, or compares it with
// the one there.
func (s *ZKSource) checkZKLayout(ctx context.Context) error {
	want := s.cache.Want()
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
		var had statefile.LayoutRec
		if err := json.Unmarshal(got, &had); err != nil {
			return fmt.Errorf("snowflake: layout node %s: bad JSON (%w); fix or remove it by hand", p, err)
		}
		if had != *want {
			return statefile.LayoutErr("worker-id domain "+p, &had, want)
		}
		return nil
	}
	return fmt.Errorf("snowflake: layout node %s keeps changing", p)
}
