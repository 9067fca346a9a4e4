package zk

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/snowflake"
)

// TestZKCopiedDataDirWaitsTolerance: a copy of a data dir opens in another directory, so it is
// another instance (statefile renews the instance id). While the original lives it is a
// standby: it never replaces the original's live node. Once the original is gone it takes the
// id over above the original's lease plus its outage tolerance: the original, cut off from
// ZooKeeper, may have issued up to there.
func TestZKCopiedDataDirWaitsTolerance(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()
	name := randomName(t)
	tol := 30 * time.Second
	dirA, dirB := t.TempDir(), t.TempDir()
	cfg := func(dir string) Config {
		c := zkCfg(addr, name, "10.7.0.1:6380", dir)
		c.OutageTolerance = tol
		return c
	}
	a, err := NewSource(cfg(dirA))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	acquire(t, a)
	until := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	if err := a.Extend(ctx, until); err != nil {
		t.Fatal(err)
	}
	testkit.CopyDir(t, dirA, dirB)
	cp := newZK(t, cfg(dirB))
	if cp.instance == a.instance {
		t.Fatalf("the copy kept the original's instance id %s", a.instance)
	}
	if _, err := cp.Acquire(ctx); !errors.Is(err, snowflake.ErrWorkerHeld) {
		t.Fatalf("copy while the original lives: got %v, want ErrWorkerHeld", err)
	}
	a.Close() // the original dies (no lowering: as kill -9)
	w := acquire(t, cp)
	if want := until.Add(tol); w.Bound.Before(want) {
		t.Fatalf("copy of the data dir starts at bound %v, below the original's lease plus tolerance %v", w.Bound, want)
	}
}

// TestZKCleanRestartSkipsTolerance: a graceful close (the generator lowers the bound, then
// closes) announces tolerance 0, so a restart on the same data dir starts just above the last
// millisecond used; a restart after a crash (no lowering) waits the tolerance.
func TestZKCleanRestartSkipsTolerance(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()
	name := randomName(t)
	tol := 30 * time.Second
	dir := t.TempDir()
	cfg := func() Config {
		c := zkCfg(addr, name, "10.7.0.1:6380", dir)
		c.OutageTolerance = tol
		return c
	}
	a, err := NewSource(cfg())
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, a)
	now := time.Now().Truncate(time.Millisecond)
	if err := a.Extend(ctx, now.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := a.Extend(ctx, now.Add(time.Millisecond)); err != nil { // Close's lowering
		t.Fatal(err)
	}
	a.Close()
	b := newZK(t, cfg())
	w := acquire(t, b)
	if !w.Bound.Before(now.Add(tol)) {
		t.Fatalf("clean restart: bound %v includes the tolerance (last lease %v)", w.Bound, now.Add(time.Millisecond))
	}
	// A crash: the bound is not lowered (Close without the lowering stands in for kill -9;
	// the live node is ours either way).
	until := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	if err := b.Extend(ctx, until); err != nil {
		t.Fatal(err)
	}
	b.Close()
	c := newZK(t, cfg())
	if w := acquire(t, c); w.Bound.Before(until.Add(tol)) {
		t.Fatalf("restart after a crash: bound %v, below the lease plus tolerance %v", w.Bound, until.Add(tol))
	}
}
