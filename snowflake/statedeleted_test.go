package snowflake

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestZKStateNodeDeletedWhileHeld (adversarial review of issue #7): the fence is the state
// node. When it is deleted by hand (an operator "cleaning up" nodes Leaf does not know, or a
// restore of ZooKeeper without them) together with the holder's live node, a successor of the
// same identity falls back to Leaf's bound, the forever node's timestamp + 3s, while the
// holder still issues up to the reserved_until it last wrote (up to --lease-window past its
// last extension, which comes after its last report). The successor must start above that.
//
// It fails on the code as reviewed: the successor's bound is the report + 3s, below the
// holder's lease (on the binary: 176,810 duplicates in one run).
func TestZKStateNodeDeletedWhileHeld(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()
	name := randomName(t)
	cfg := func() ZKConfig {
		c := zkCfg(addr, name, "10.7.0.1:6380", t.TempDir())
		c.ReportInterval = 3 * time.Second // Leaf's period, the default
		return c
	}
	a := newZK(t, cfg())
	w := acquire(t, a)
	// The holder's lease, as the generator extends it with --lease-window 5s.
	until := time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
	if err := a.Extend(ctx, until); err != nil {
		t.Fatal(err)
	}
	c := adminConn(t, addr)
	for _, p := range []string{fmt.Sprintf("/snowflake/%s/state/%d", name, w.ID), fmt.Sprintf("/snowflake/%s/live/%d", name, w.ID)} {
		if err := c.Delete(p, -1); err != nil {
			t.Fatalf("delete %s: %v", p, err)
		}
	}
	b := newZK(t, cfg())
	wb := acquire(t, b)
	if wb.ID == w.ID && !wb.Bound.After(until) {
		t.Fatalf("successor got worker %d with bound %v, below the holder's lease %v: both issue in between",
			wb.ID, wb.Bound, until)
	}
}
