package ordered

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/internal/testenv"
)

// TestMySQLLeaseGeneration: on a Galera cluster, a lease read that finds the cluster's seqno
// below one the process saw (a History that saw a far higher seqno of the same state UUID:
// what an earlier run saw before the cluster was bootstrapped again from a member that lacked
// commits) begins a new generation, and the read runs again under the new identity. The row
// then counts as written by another database (Server != At), which makes a take settle
// (judgeLocked); the take records the new identity. Mutant: the check removed from Read: caught.
func TestMySQLLeaseGeneration(t *testing.T) {
	g := testenv.StartGalera(t, 2)
	g.Nodes[0].Exec("CREATE DATABASE l")
	m, db := openLeases(t, g.Nodes[1].DSN("l"), "")
	h, err := mysqlcluster.OpenHistory("", nil)
	if err != nil {
		t.Fatal(err)
	}
	m.SetCluster(h)
	ctx := context.Background()
	if err := m.MarkOrdered(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	r, err := m.Read(ctx, "t")
	if err != nil || r.Server != r.At {
		t.Fatalf("first read: %+v, %v: want the row written by the database answering", r, err)
	}
	uuid := g.Nodes[1].Status("wsrep_cluster_state_uuid")
	if err := h.Check(ctx, nil, mysqlcluster.State{UUID: uuid, Seqno: 1 << 40, Local: mysqlcluster.Synced}); err != nil {
		t.Fatal(err)
	}
	r, err = m.Read(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if r.Server == r.At {
		t.Fatalf("read after the loss: %+v: want the row counted as written by another database", r)
	}
	var gen int64
	if err := db.QueryRow("SELECT gen FROM leafd_generation WHERE state_uuid = ?", uuid).Scan(&gen); err != nil || gen != 1 {
		t.Fatalf("leafd_generation: %d, %v; want generation 1", gen, err)
	}
	w, ok, err := m.Write(ctx, "t", r, "me", true, time.Second)
	if err != nil || !ok || w.Server != r.At {
		t.Fatalf("take: %+v %v %v", w, ok, err)
	}
	r, err = m.Read(ctx, "t")
	if err != nil || r.Server != r.At || r.Holder != "me" {
		t.Fatalf("read after the take: %+v, %v", r, err)
	}
	if _, err := m.Read(ctx, "missing"); !errors.Is(err, ErrNotOrdered) {
		t.Fatalf("a tag without a row: %v", err)
	}
}
