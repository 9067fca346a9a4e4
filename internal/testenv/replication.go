package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Replication is a pair of private MariaDB servers replicating asynchronously with GTIDs,
// for failover tests: a primary with a row binlog and durable commits (sync_binlog=1,
// innodb_flush_log_at_trx_commit=1) and a replica that applies it. Both log what they apply
// (log_slave_updates), so that either can be promoted and serve a fresh replica from its own
// binlog. Failover swaps the roles; Rejoin makes the old primary a replica again.
//
// Call its methods from the test goroutine (they call t.Fatal).
type Replication struct {
	t        testing.TB
	serverID int // last server id handed out
	Primary  *MariaDB
	Replica  *MariaDB
}

// replOpts are the mariadbd options of both servers (plus --server-id).
var replOpts = []string{
	"--log-bin=mariadb-bin",
	"--binlog-format=ROW",
	"--sync-binlog=1",
	"--log-slave-updates",
	"--slave-net-timeout=5",
}

// StartReplication starts the two servers and attaches the replica to the primary. Create
// databases on the primary after it returns: the replica receives everything.
func StartReplication(t testing.TB) *Replication {
	t.Helper()
	return StartReplicationEnv(t, nil, nil)
}

// StartReplicationEnv is StartReplication with primaryEnv and replicaEnv added to each
// server's environment (e.g. FakeTime.Env: servers whose clocks differ).
func StartReplicationEnv(t testing.TB, primaryEnv, replicaEnv []string) *Replication {
	t.Helper()
	r := &Replication{t: t, serverID: 2}
	r.Primary = StartMariaDBEnv(t, primaryEnv, append([]string{"--server-id=1"}, replOpts...)...)
	r.Replica = StartMariaDBEnv(t, replicaEnv, append([]string{"--server-id=2"}, replOpts...)...)
	r.attach(r.Replica, r.Primary)
	return r
}

// Exec runs statements on m as root, outside any database.
func (m *MariaDB) Exec(stmts ...string) {
	m.t.Helper()
	db := m.db()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One connection, so that session settings (sql_log_bin) hold for what follows.
	c, err := db.Conn(ctx)
	if err != nil {
		m.t.Fatalf("testenv: %s: %v", m.Addr(), err)
	}
	defer c.Close()
	for _, s := range stmts {
		if _, err := c.ExecContext(ctx, s); err != nil {
			m.t.Fatalf("testenv: %s: %s: %v", m.Addr(), s, err)
		}
	}
}

// QueryString returns the first column of the first row of q on m ("" for NULL or no row).
func (m *MariaDB) QueryString(q string, args ...any) string {
	m.t.Helper()
	db := m.db()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s sql.NullString
	if err := db.QueryRowContext(ctx, q, args...).Scan(&s); err != nil && err != sql.ErrNoRows {
		m.t.Fatalf("testenv: %s: %s: %v", m.Addr(), q, err)
	}
	return s.String
}

func (m *MariaDB) db() *sql.DB {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		m.t.Fatalf("testenv: %v", err)
	}
	db.SetMaxOpenConns(1)
	return db
}

// attach makes replica replicate from primary from the start of primary's binlog.
func (r *Replication) attach(replica, primary *MariaDB) {
	r.t.Helper()
	_, port, _ := strings.Cut(primary.Addr(), ":")
	replica.Exec(
		"SET GLOBAL gtid_slave_pos = ''",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER='root', MASTER_PASSWORD='', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos", port),
		"START SLAVE",
	)
}

// seq is the sequence number of the last GTID in a MariaDB GTID position ("0-1-57" → 57);
// the pair uses one replication domain.
func seq(pos string) int64 {
	pos = strings.TrimSpace(pos)
	if pos == "" {
		return 0
	}
	var best int64
	for _, g := range strings.Split(pos, ",") {
		i := strings.LastIndexByte(g, '-')
		n, _ := strconv.ParseInt(strings.TrimSpace(g[i+1:]), 10, 64)
		best = max(best, n)
	}
	return best
}

// Written is the sequence number of the last transaction the primary wrote to its binlog.
func (r *Replication) Written() int64 {
	r.t.Helper()
	return seq(r.Primary.QueryString("SELECT @@gtid_binlog_pos"))
}

// Applied is the sequence number of the last transaction the replica applied.
func (r *Replication) Applied() int64 {
	r.t.Helper()
	return seq(r.Replica.QueryString("SELECT @@gtid_current_pos"))
}

// WaitCaughtUp waits until the replica has applied everything the primary wrote.
func (r *Replication) WaitCaughtUp(timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w, a := r.Written(), r.Applied()
		if a >= w {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("testenv: replica applied %d of %d transactions after %v: %s", a, w, timeout, r.slaveStatus())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StopApplier stops the replica's SQL thread: it keeps receiving the primary's binlog but
// applies nothing, so it falls behind by every later commit (lag on demand).
func (r *Replication) StopApplier() {
	r.t.Helper()
	r.Replica.Exec("STOP SLAVE SQL_THREAD")
}

// Promote makes the replica a primary as failover tools do (STOP SLAVE; RESET SLAVE ALL):
// what it received but had not applied is thrown away. The roles are swapped: Primary is
// the promoted server, Replica the old primary, which is left running but detached (call
// Rejoin). It returns how many transactions of the old primary the new one lacks.
func (r *Replication) Promote() (lost int64) {
	r.t.Helper()
	written := r.Written()
	r.Replica.Exec("STOP SLAVE", "RESET SLAVE ALL")
	applied := r.Applied()
	r.Primary, r.Replica = r.Replica, r.Primary
	return written - applied
}

// Rejoin turns the detached old primary into a replica of the current primary: its
// databases dbs are dropped and its binlog reset without replicating that, and it replays
// the primary's binlog from the start (the primary logs what it applied as a replica too).
// It gets a new server id, as a rebuilt server would: with its old one it would skip the
// events it once wrote itself.
func (r *Replication) Rejoin(dbs ...string) {
	r.t.Helper()
	r.serverID++
	stmts := []string{"STOP SLAVE", "RESET SLAVE ALL", "SET sql_log_bin = 0",
		fmt.Sprintf("SET GLOBAL server_id = %d", r.serverID)}
	for _, d := range dbs {
		stmts = append(stmts, "DROP DATABASE IF EXISTS `"+d+"`")
	}
	stmts = append(stmts, "RESET MASTER")
	r.Replica.Exec(stmts...)
	r.attach(r.Replica, r.Primary)
}

// slaveStatus summarizes SHOW SLAVE STATUS of the replica, for failure messages.
func (r *Replication) slaveStatus() string {
	db := r.Replica.db()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return "not a replica"
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i, c := range cols {
		switch c {
		case "Slave_IO_Running", "Slave_SQL_Running", "Last_IO_Error", "Last_SQL_Error", "Gtid_IO_Pos", "Master_Port":
			fmt.Fprintf(&b, "%s=%q ", c, vals[i].String)
		}
	}
	return b.String()
}
