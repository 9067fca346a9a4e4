package testenv

import (
	"testing"
	"time"
)

func TestGalera(t *testing.T) {
	start := time.Now()
	g := StartGalera(t, 2)
	t.Logf("2 nodes synced in %v", time.Since(start))
	for i, n := range g.Nodes {
		if got := n.Status("wsrep_cluster_size"); got != "2" {
			t.Fatalf("node %d: wsrep_cluster_size %q, want 2", i, got)
		}
	}
	g.Nodes[0].Exec("CREATE DATABASE gt", "CREATE TABLE gt.t (id int primary key)", "INSERT INTO gt.t VALUES (1)")
	if got := g.Nodes[1].QueryString("SELECT COUNT(*) FROM gt.t"); got != "1" {
		t.Fatalf("node 1 sees %q rows, want 1", got)
	}
	u0, u1 := g.Nodes[0].Status("wsrep_cluster_state_uuid"), g.Nodes[1].Status("wsrep_cluster_state_uuid")
	if u0 == "" || u0 != u1 {
		t.Fatalf("state uuids %q and %q", u0, u1)
	}
	start = time.Now()
	g.Nodes[1].Kill()
	g.Nodes[0].Exec("INSERT INTO gt.t VALUES (2)")
	g.Nodes[1].Start()
	t.Logf("node 1 killed and rejoined in %v", time.Since(start))
	if got := g.Nodes[1].QueryString("SELECT COUNT(*) FROM gt.t"); got != "2" {
		t.Fatalf("node 1 sees %q rows after rejoin, want 2", got)
	}
}
