package zk

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leafd/leafd/snowflake"
)

// TestZKCopiedDataDirWaitsTolerance (adversarial review of issue #7): a copy of a data dir has
// the same instance id, so it replaces the original's live node as a dead predecessor's. The
// original may still run, cut off from ZooKeeper, issuing up to its confirmed bound plus the
// outage tolerance: the copy must start above that.
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
	a := newZK(t, cfg(dirA))
	acquire(t, a)
	until := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	if err := a.Extend(ctx, until); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dirA, snowflake.LocalStateFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirB, snowflake.LocalStateFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	cp := newZK(t, cfg(dirB))
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
