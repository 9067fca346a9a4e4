package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	gozk "github.com/go-zookeeper/zk"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// UseLayout implements snowflake.LayoutUser.
func (s *Source) UseLayout(l snowflake.Layout) {
	s.cache.Lock()
	s.cache.SetWant(snowflake.LayoutRecord(l))
	s.cache.Unlock()
}

// checkZKLayout creates /snowflake/<name>/layout with this run's layout, or compares it with
// the one there.
func (s *Source) checkZKLayout(ctx context.Context) error {
	want := s.cache.Want()
	if want == nil {
		return nil
	}
	p := s.root + "/layout"
	b, _ := json.Marshal(want)
	for range 3 {
		_, err := call(s, ctx, func() (string, error) { return s.conn.Create(p, b, 0, gozk.WorldACL(gozk.PermAll)) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, gozk.ErrNodeExists) {
			return err
		}
		got, err := call(s, ctx, func() ([]byte, error) {
			b, _, err := s.conn.Get(p)
			return b, err
		})
		if errors.Is(err, gozk.ErrNoNode) {
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
