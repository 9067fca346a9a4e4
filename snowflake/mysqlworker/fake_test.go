package mysqlworker

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/leafd/leafd/internal/clock"
)

// fakeRow is a row of fakeStore; expires is on the fake database's clock.
type fakeRow struct {
	row
	expires time.Time
}

// fakeStore is the table in memory, with the same conditions as the SQL of sqlStore, on a
// database clock of its own. Faults: fail makes the next call of an operation fail (after
// applying it when applied is set: an ambiguous write); slow advances a fake clock while an
// operation "runs" (a slow answer).
type fakeStore struct {
	mu      sync.Mutex
	db      clock.Clock
	rows    map[int64]fakeRow
	fail    map[string]bool // op → fail its next call
	applied map[string]bool // op → a failing call was applied first
	slow    map[string]time.Duration
	slowClk *clock.Fake
	calls   map[string]int
}

func newFakeStore(db clock.Clock) *fakeStore {
	return &fakeStore{db: db, rows: map[int64]fakeRow{}, fail: map[string]bool{}, applied: map[string]bool{},
		slow: map[string]time.Duration{}, calls: map[string]int{}}
}

var errFake = errors.New("fake: connection lost (outcome unknown)")

// snapshot and restore model a failover to a replica that had applied up to the snapshot.
func (f *fakeStore) snapshot() map[int64]fakeRow {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.rows)
}

func (f *fakeStore) restore(m map[int64]fakeRow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows = maps.Clone(m)
}

func (f *fakeStore) get(id int64) (fakeRow, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rows[id]
	return r, ok
}

// op runs apply under the fault settings of name.
func (f *fakeStore) op(name string, apply func() bool) (bool, error) {
	f.mu.Lock()
	f.calls[name]++
	d, clk := f.slow[name], f.slowClk
	fail, applied := f.fail[name], f.applied[name]
	delete(f.fail, name)
	f.mu.Unlock()
	if d > 0 && clk != nil {
		clk.Add(d)
	}
	if fail && !applied {
		return false, errFake
	}
	f.mu.Lock()
	ok := apply()
	f.mu.Unlock()
	if fail {
		return false, errFake
	}
	return ok, nil
}

func (f *fakeStore) free(r fakeRow) bool { return r.Token == "" || !f.db.Now().Before(r.expires) }

func (f *fakeStore) Ensure(context.Context) error {
	_, err := f.op("ensure", func() bool { return true })
	return err
}

func (f *fakeStore) List(context.Context) ([]row, error) {
	var out []row
	_, err := f.op("list", func() bool {
		for id := int64(0); id < 1<<16; id++ {
			if r, ok := f.rows[id]; ok {
				r.Free = f.free(r)
				out = append(out, r.row)
			}
		}
		return true
	})
	return out, err
}

func (f *fakeStore) Get(_ context.Context, id int64) (row, bool, error) {
	var out row
	ok, err := f.op("get", func() bool {
		r, ok := f.rows[id]
		r.Free = f.free(r)
		out = r.row
		return ok
	})
	return out, ok, err
}

func (f *fakeStore) Take(_ context.Context, id, version int64, c claim) (bool, error) {
	return f.op("take", func() bool {
		r, ok := f.rows[id]
		if !ok || r.Version != version || !f.free(r) {
			return false
		}
		r.Holder, r.Instance, r.Token, r.Layout = c.Holder, c.Instance, c.Token, c.Layout
		r.Epoch++
		r.Version++
		r.expires = f.db.Now().Add(c.Lease)
		f.rows[id] = r
		return true
	})
}

func (f *fakeStore) Insert(_ context.Context, id int64, c claim) (bool, error) {
	return f.op("insert", func() bool {
		if _, ok := f.rows[id]; ok {
			return false
		}
		f.rows[id] = fakeRow{row: row{ID: id, Holder: c.Holder, Instance: c.Instance, Token: c.Token, Epoch: 1, Version: 1, Layout: c.Layout},
			expires: f.db.Now().Add(c.Lease)}
		return true
	})
}

func (f *fakeStore) fenced(id, epoch int64, token string, w func(*fakeRow)) func() bool {
	return func() bool {
		r, ok := f.rows[id]
		if !ok || r.Epoch != epoch || r.Token != token {
			return false
		}
		w(&r)
		r.Version++
		f.rows[id] = r
		return true
	}
}

func (f *fakeStore) Renew(_ context.Context, id, epoch int64, token string, untilMs int64, lease time.Duration) (bool, error) {
	return f.op("renew", f.fenced(id, epoch, token, func(r *fakeRow) {
		r.expires = f.db.Now().Add(lease)
		r.ReservedUntil = max(r.ReservedUntil, untilMs)
	}))
}

func (f *fakeStore) Reclaim(_ context.Context, id, epoch int64, token string, lease time.Duration) (bool, error) {
	return f.op("reclaim", f.fenced(id, epoch, token, func(r *fakeRow) {
		r.expires = f.db.Now().Add(lease)
		r.Epoch++
	}))
}

func (f *fakeStore) Release(_ context.Context, id, epoch int64, token string, untilMs int64) (bool, error) {
	return f.op("release", f.fenced(id, epoch, token, func(r *fakeRow) {
		r.Token = ""
		r.expires = f.db.Now()
		r.ReservedUntil = max(r.ReservedUntil, untilMs)
	}))
}

func (f *fakeStore) Close() error { return nil }
