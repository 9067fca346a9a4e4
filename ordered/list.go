package ordered

import (
	"context"

	"go.uber.org/zap"
)

// listLoop lists the ordered tags every Length, apart from the lease goroutine: a list on a
// slow link must not delay a renewal past its deadline.
func (m *Manager) listLoop(ctx context.Context) {
	defer m.wg.Done()
	clk := m.cfg.Clock
	for {
		tm := clk.NewTimer(max(0, m.nextList.Sub(clk.Now())))
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C():
		}
		m.refreshList(ctx)
		m.nextList = clk.Now().Add(m.cfg.Length)
	}
}

// refreshList adds the ordered tags the store lists that are not known here.
func (m *Manager) refreshList(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	tags, err := m.cat.List(cctx)
	cancel()
	if err != nil {
		if m.listed.Load() {
			m.cfg.Log.Debug("ordered: list failed", zap.Error(err))
		} else {
			m.cfg.Log.Warn("ordered: cannot list the ordered tags yet; retrying", zap.Error(err))
		}
		return
	}
	m.listed.Store(true)
	for _, tag := range tags {
		if m.Lookup(tag) == nil {
			if _, err := m.Add(tag); err != nil {
				m.cfg.Log.Warn("ordered: tag not tracked", zap.String("tag", tag), zap.Error(err))
			}
		}
	}
}

// remove forgets an ordered tag whose row is gone (it becomes an ordinary tag).
func (m *Manager) remove(tag string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.tags.Load()
	t := old[tag]
	if t == nil {
		return
	}
	t.lease.Drop()
	nm := make(map[string]*Tag, len(old))
	for k, v := range old {
		if k != tag {
			nm[k] = v
		}
	}
	m.tags.Store(&nm)
	m.n.Store(int64(len(nm)))
	m.cfg.Log.Info("ordered: the tag's lease row is gone; it is an ordinary tag now", zap.String("tag", tag))
}
