package testenv

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// syncedCount is the number of rows of gt.t on m once m has applied every write the cluster
// committed before the read (wsrep_sync_wait=1): a write certified on one node is applied on
// the others a moment later, so a plain read there may not see it yet.
func syncedCount(t *testing.T, m *MariaDB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(m.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = map[string]string{"wsrep_sync_wait": "1"}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n string
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM gt.t").Scan(&n); err != nil {
		t.Fatalf("%s: %v", m.Addr(), err)
	}
	return n
}

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
	if got := syncedCount(t, g.Nodes[1].MariaDB); got != "1" {
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
	if got := syncedCount(t, g.Nodes[1].MariaDB); got != "2" {
		t.Fatalf("node 1 sees %q rows after rejoin, want 2", got)
	}
}
