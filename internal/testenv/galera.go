package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// galeraProvider is the wsrep provider of the galera-4 package.
const galeraProvider = "/usr/lib/galera/libgalera_smm.so"

// Galera is a private MariaDB Galera cluster on loopback: every node a writer, rsync state
// transfers, row binlog format and interleaved auto-increment locks (what Galera requires).
// Node 0 bootstraps it and carries weight 2 in the quorum, so the cluster keeps its primary
// component when any other single node of a two-node cluster is killed.
//
// Every port is picked below the ephemeral range (ServerPort): the kernel hands out
// ephemeral source ports above it, and a node's port taken by another process's outgoing
// connection would stop it from rejoining. The picks are not retried: every node's ports
// are in the others' configuration (gcomm://...), so a port another server took means a new
// cluster, not a new node.
//
// Call its methods from the test goroutine (they call t.Fatal).
type Galera struct {
	t     testing.TB
	name  string
	Nodes []*GaleraNode
}

// GaleraNode is one member: a MariaDB whose client port and group ports stay fixed across
// Kill and Start.
type GaleraNode struct {
	*MariaDB
	g       *Galera
	index   int
	gcomm   int // group communication
	ist     int // incremental state transfer receiver
	sst     int // rsync state transfer receiver
	datadir string
	base    []string // mariadbd's command line without --wsrep-new-cluster
}

// StartGalera starts a cluster of n nodes (n >= 2), each synced when it returns. Missing
// binaries or the galera-4 package skip the test, or fail it under CI or LEAFD_TEST_REQUIRE.
func StartGalera(t testing.TB, n int) *Galera {
	t.Helper()
	if _, err := os.Stat(galeraProvider); err != nil {
		missing(t, "%s not found (install the galera-4 package)", galeraProvider)
	}
	if _, err := exec.LookPath("rsync"); err != nil {
		missing(t, "rsync not found (install the rsync package; Galera's rsync state transfer needs it)")
	}
	server, ok := lookBin([]string{"mariadbd", "mysqld"}, "/usr/sbin", "/usr/libexec", "/usr/local/sbin")
	if !ok {
		missing(t, "mariadbd not found (install the mariadb-server package)")
	}
	g := &Galera{t: t, name: fmt.Sprintf("leafd_t_%08x", rand.Uint32())}
	ports := serverPorts(t, 4*n) // client, group communication, IST, SST per node
	for i := range n {
		dir, err := os.MkdirTemp("", "leafd-galera-")
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		node := &GaleraNode{MariaDB: &MariaDB{t: t, dir: dir}, g: g, index: i, datadir: filepath.Join(dir, "data")}
		node.port, node.gcomm, node.ist, node.sst = ports[4*i], ports[4*i+1], ports[4*i+2], ports[4*i+3]
		for _, d := range []string{node.datadir, filepath.Join(dir, "tmp")} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatalf("testenv: %v", err)
			}
		}
		g.Nodes = append(g.Nodes, node)
	}
	g.install(g.Nodes[0])
	for _, node := range g.Nodes {
		node.base = node.argv(server)
		node.proc = &proc{t: t, name: fmt.Sprintf("galera node %d", node.index), logPath: filepath.Join(node.dir, "mariadbd.log")}
		t.Cleanup(func() { node.proc.terminate(false, 0) })
		node.Start()
	}
	return g
}

// install creates node's data directory (the bootstrap node; the others receive theirs by
// state transfer).
func (g *Galera) install(node *GaleraNode) {
	g.t.Helper()
	install, ok := lookBin([]string{"mariadb-install-db", "mysql_install_db"}, "/usr/bin", "/usr/sbin", "/usr/local/mysql/bin")
	if !ok {
		missing(g.t, "mariadb-install-db not found (install the mariadb-server package)")
	}
	args := append([]string{"--no-defaults", "--auth-root-authentication-method=normal",
		"--datadir=" + node.datadir, "--skip-test-db", "--tmpdir=" + filepath.Join(node.dir, "tmp")}, rootUser()...)
	args = append(args, mariadbOpts...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, install, args...).CombinedOutput(); err != nil {
		g.t.Fatalf("testenv: %s: %v\n%s", install, err, out)
	}
}

func rootUser() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"} // mariadbd refuses to run as root otherwise
	}
	return nil
}

// argv is the node's mariadbd command line. The address list names every node; node 0
// bootstraps the cluster (--wsrep-new-cluster) only at its first start.
func (n *GaleraNode) argv(server string) []string {
	var peers []string
	for _, o := range n.g.Nodes {
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(o.gcomm))
	}
	weight := 1
	if n.index == 0 {
		weight = 2
	}
	provider := strings.Join([]string{
		"gmcast.listen_addr=tcp://127.0.0.1:" + strconv.Itoa(n.gcomm),
		"ist.recv_addr=127.0.0.1:" + strconv.Itoa(n.ist),
		"pc.weight=" + strconv.Itoa(weight),
		"gcache.size=32M",
		// A killed member is noticed within seconds, not the default 15.
		"evs.suspect_timeout=PT2S", "evs.inactive_timeout=PT3S", "evs.install_timeout=PT2S", "evs.keepalive_period=PT0.5S",
	}, ";")
	argv := append([]string{server, "--no-defaults",
		"--datadir=" + n.datadir,
		"--tmpdir=" + filepath.Join(n.dir, "tmp"),
		"--socket=" + filepath.Join(n.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
		"--port=" + strconv.Itoa(n.port),
		"--bind-address=127.0.0.1",
		"--server-id=" + strconv.Itoa(n.index+1),
		"--wsrep-on=ON",
		"--wsrep-provider=" + galeraProvider,
		"--wsrep-cluster-name=" + n.g.name,
		"--wsrep-cluster-address=gcomm://" + strings.Join(peers, ","),
		"--wsrep-node-name=node" + strconv.Itoa(n.index),
		"--wsrep-node-address=127.0.0.1:" + strconv.Itoa(n.gcomm),
		"--wsrep-node-incoming-address=127.0.0.1:" + strconv.Itoa(n.port),
		"--wsrep-sst-receive-address=127.0.0.1:" + strconv.Itoa(n.sst),
		"--wsrep-sst-method=rsync",
		"--wsrep-provider-options=" + provider,
		"--wsrep-slave-threads=2",
		"--binlog-format=ROW",
		"--innodb-autoinc-lock-mode=2",
		"--default-storage-engine=InnoDB",
	}, rootUser()...)
	return append(argv, slices.DeleteFunc(slices.Clone(mariadbOpts), func(s string) bool {
		return strings.HasPrefix(s, "--innodb-flush-log-at-trx-commit")
	})...)
}

// Start starts (or restarts after Kill or Stop) the node and waits until it is synced with
// the cluster. Node 0 bootstraps a new cluster at its first start; later it rejoins the
// others. A joiner's data directory belongs to nobody when run as root: the rsync daemon of
// the state transfer drops to that user.
func (n *GaleraNode) Start() {
	n.t.Helper()
	argv := n.base
	if n.index == 0 && !n.started() {
		argv = append(slices.Clone(argv), "--wsrep-new-cluster")
	}
	if n.index > 0 && os.Geteuid() == 0 {
		if err := chownTree(n.dir, "nobody"); err != nil {
			n.t.Fatalf("testenv: %v", err)
		}
	}
	n.proc.argv = argv
	err := n.start()
	if err == nil {
		err = n.WaitSynced(2 * time.Minute)
	}
	if err != nil {
		n.proc.terminate(false, 0)
		n.t.Fatalf("testenv: galera node %d: %v\n--- mariadbd log:\n%s", n.index, err, n.proc.logTail())
	}
}

// started reports whether the node ever ran (its data directory holds Galera's state file).
func (n *GaleraNode) started() bool {
	_, err := os.Stat(filepath.Join(n.datadir, "grastate.dat"))
	return err == nil
}

// WaitSynced waits until the node reports wsrep_local_state_comment Synced and is ready.
func (n *GaleraNode) WaitSynced(timeout time.Duration) error {
	db := n.db()
	defer db.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var name, state string
		err := db.QueryRowContext(ctx, "SHOW STATUS LIKE 'wsrep_local_state_comment'").Scan(&name, &state)
		cancel()
		if err == nil && state == "Synced" {
			return nil
		}
		select {
		case <-n.proc.exited():
			return fmt.Errorf("mariadbd exited (state %q, %v)", state, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not synced after %v (state %q, %v)", timeout, state, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Status returns the node's wsrep status variable name ("" when unknown).
func (n *GaleraNode) Status(name string) string {
	n.t.Helper()
	db := n.db()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var k string
	var v sql.NullString
	if err := db.QueryRowContext(ctx, "SHOW STATUS LIKE '"+strings.ReplaceAll(name, "'", "")+"'").Scan(&k, &v); err != nil && err != sql.ErrNoRows {
		n.t.Fatalf("testenv: galera node %d: status %s: %v", n.index, name, err)
	}
	return v.String
}

// Addrs are the nodes' client addresses (host:port).
func (g *Galera) Addrs() []string {
	var out []string
	for _, n := range g.Nodes {
		out = append(out, n.Addr())
	}
	return out
}

// DSNs are go-sql-driver DSNs for root on database db, one per node.
func (g *Galera) DSNs(db string) []string {
	var out []string
	for _, n := range g.Nodes {
		out = append(out, n.DSN(db))
	}
	return out
}

// chownTree gives dir and everything below it to user.
func chownTree(dir, user string) error {
	out, err := exec.Command("chown", "-R", user, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chown -R %s %s: %v: %s", user, dir, err, out)
	}
	return nil
}

// NewHistory removes the stopped node's Galera state file (grastate.dat), so that its next
// Start bootstraps a new cluster over the same data, under a new state UUID: what an
// operator does to a node that may lack commits before bootstrapping from it.
func (n *GaleraNode) NewHistory() {
	n.t.Helper()
	if err := os.Remove(filepath.Join(n.datadir, "grastate.dat")); err != nil {
		n.t.Fatalf("testenv: galera node %d: %v", n.index, err)
	}
	if n.index != 0 {
		n.t.Fatalf("testenv: only node 0 bootstraps")
	}
}

// Bootstrap starts the stopped node as a new cluster from its own data, whatever its
// grastate.dat says: safe_to_bootstrap forced to 1 and --wsrep-new-cluster, what an operator
// does with galera_new_cluster on a member that did not leave last. The cluster keeps the
// node's state UUID and continues from its sequence number: if the node had left before the
// others, the commits it missed are lost.
func (n *GaleraNode) Bootstrap() {
	n.t.Helper()
	path := filepath.Join(n.datadir, "grastate.dat")
	b, err := os.ReadFile(path)
	if err != nil {
		n.t.Fatalf("testenv: galera node %d: %v", n.index, err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "safe_to_bootstrap:") {
			lines[i] = "safe_to_bootstrap: 1"
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o660); err != nil {
		n.t.Fatalf("testenv: galera node %d: %v", n.index, err)
	}
	if n.index > 0 && os.Geteuid() == 0 {
		if err := chownTree(n.dir, "nobody"); err != nil {
			n.t.Fatalf("testenv: %v", err)
		}
	}
	n.proc.argv = append(slices.Clone(n.base), "--wsrep-new-cluster")
	err = n.start()
	if err == nil {
		err = n.WaitSynced(2 * time.Minute)
	}
	if err != nil {
		n.proc.terminate(false, 0)
		n.t.Fatalf("testenv: galera node %d: bootstrap: %v\n--- mariadbd log:\n%s", n.index, err, n.proc.logTail())
	}
}

// ForgetState removes the stopped node's Galera state file, so that its next Start joins by a
// full state transfer: what a member that is ahead of a cluster bootstrapped from another
// one needs (its extra commits are the ones the cluster lost, not a prefix of its history).
func (n *GaleraNode) ForgetState() {
	n.t.Helper()
	if err := os.Remove(filepath.Join(n.datadir, "grastate.dat")); err != nil {
		n.t.Fatalf("testenv: galera node %d: %v", n.index, err)
	}
}
