package ordered

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/mysqlcluster"
)

// mysqlCreateLeader is leafd's table of ORDERED tags and their leader leases: a row marks the
// tag as ordered. Who may take a row is judged by the instances on their own clocks from
// version and server_id (Lease.Renew); expires (on the database clock) is for people only.
const mysqlCreateLeader = "CREATE TABLE IF NOT EXISTS `leafd_leader` (\n" +
	"  `biz_tag` varchar(128) NOT NULL,\n" +
	"  `holder` varchar(255) NOT NULL DEFAULT '' COMMENT 'the instance holding the lease',\n" +
	"  `epoch` bigint NOT NULL DEFAULT 0 COMMENT 'term: grows by one at each take',\n" +
	"  `expires` datetime(3) NOT NULL DEFAULT '1970-01-02 00:00:00.000' COMMENT 'database clock; informative only',\n" +
	"  `server_id` bigint NOT NULL DEFAULT 0 COMMENT 'identity of the database that wrote the row last (a change: a failover); on Galera, of the cluster',\n" +
	mysqlLeaderColumns +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

// mysqlLeaderColumns are the columns added to tables created before them (EnsureTable).
const mysqlLeaderColumns = "  `version` bigint NOT NULL DEFAULT 0 COMMENT 'grows by one at each write; a take compares it',\n" +
	"  `lease_us` bigint NOT NULL DEFAULT 0 COMMENT 'length of the latest grant',\n" +
	"  `longest_us` bigint NOT NULL DEFAULT 0 COMMENT 'longest lease ever granted in the row',\n"

// CreateRowSQL inserts an ordered tag's row (one argument: the tag), recording the database
// that created it (identity: the SQL of its identity, mysqlcluster.Ident.ID): a failover
// before the first grant is then seen like any other.
func CreateRowSQL(identity string) string {
	return "INSERT IGNORE INTO leafd_leader (biz_tag, server_id) VALUES (?, " + identity + ")"
}

// MySQLLeases is the lease Store on MySQL/MariaDB (the database of the segment store).
type MySQLLeases struct {
	db      *sql.DB
	timeout time.Duration
	ensured atomic.Bool            // leafd_leader exists
	ident   atomic.Pointer[string] // SQL of the database's identity (mysqlcluster), once known
	full    atomic.Pointer[mysqlcluster.Ident]
	cluster *mysqlcluster.History // what the process saw of a Galera cluster (SetCluster); nil: not checked

	// The lease statements' own connection. A statement that times out loses its
	// connection (the driver closes it); a new one is opened within timeout, not within the
	// statement's shorter bound: on a slow link the handshake's round trips would exceed
	// it every time, and the lease could never be renewed again.
	mu   sync.Mutex
	conn *sql.Conn
}

// NewMySQLLeases uses db (owned by the caller) with timeout per call.
func NewMySQLLeases(db *sql.DB, timeout time.Duration) *MySQLLeases {
	return &MySQLLeases{db: db, timeout: timeout}
}

// SetCluster makes every read of a row also check the Galera member's state against h (the
// history the segment store of the database checks): a cluster restarted from a member that
// lacked commits is then another database to the lease, which settles. Call before use.
func (m *MySQLLeases) SetCluster(h *mysqlcluster.History) { m.cluster = h }

// EnsureTable creates leafd_leader if missing.
func (m *MySQLLeases) EnsureTable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if _, err := m.db.ExecContext(ctx, mysqlCreateLeader); err != nil {
		return err
	}
	if err := m.addColumns(ctx); err != nil {
		return err
	}
	m.ensured.Store(true)
	return nil
}

// addColumns adds to a table created before them the columns of mysqlLeaderColumns (MySQL
// has no ADD COLUMN IF NOT EXISTS).
func (m *MySQLLeases) addColumns(ctx context.Context) error {
	rows, err := m.db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafd_leader'")
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			_ = rows.Close()
			return err
		}
		have[strings.ToLower(c)] = true
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, def := range strings.Split(strings.TrimSuffix(mysqlLeaderColumns, ",\n"), ",\n") {
		def = strings.TrimSpace(def)
		name := strings.Trim(strings.Fields(def)[0], "`")
		if have[name] {
			continue
		}
		if _, err := m.db.ExecContext(ctx, "ALTER TABLE leafd_leader ADD COLUMN "+def); err != nil && !isDupColumn(err) {
			return err
		}
	}
	return nil
}

// isDupColumn: another instance added the column first (ER_DUP_FIELDNAME).
func isDupColumn(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1060
}

// MarkOrdered records tag as ORDERED (idempotent).
func (m *MySQLLeases) MarkOrdered(ctx context.Context, tag string) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	self, err := m.identity(ctx)
	if err != nil {
		return err
	}
	_, err = m.db.ExecContext(ctx, CreateRowSQL(self), tag)
	return err
}

// IsOrdered reports whether tag has a row in leafd_leader.
func (m *MySQLLeases) IsOrdered(ctx context.Context, tag string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	var name string
	err := m.db.QueryRowContext(ctx, "SELECT biz_tag FROM leafd_leader WHERE biz_tag = ?", tag).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err == nil && name != tag {
		// The collation matched another spelling: the same leaf_alloc row, but a lease of its
		// own would make a second leader of one counter (TestMySQLOrderedOneSpelling).
		return false, fmt.Errorf("%w: %q is %q", ErrOtherSpelling, tag, name)
	}
	return err == nil, err
}

// List returns every ordered tag.
func (m *MySQLLeases) List(ctx context.Context) ([]string, error) {
	if !m.ensured.Load() { // not created at the start (the database was down)
		if err := m.EnsureTable(ctx); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	rows, err := m.db.QueryContext(ctx, "SELECT biz_tag FROM leafd_leader")
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var tags []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		tags = append(tags, t)
	}
	return tags, rows.Err()
}

// identity is the SQL of the identity of the database answering, one BIGINT
// (mysqlcluster.Detect: the server's, or on a Galera member the cluster's, so that moving
// between members is no failover). Every write of a lease row records it (server_id) and
// every take and renewal compares it: a change is a failover. It is the one place that says
// what a database is.
func (m *MySQLLeases) identity(ctx context.Context) (string, error) {
	if p := m.ident.Load(); p != nil {
		return *p, nil
	}
	id, err := mysqlcluster.Detect(ctx, m.db)
	if err != nil {
		return "", err
	}
	m.full.Store(&id)
	m.ident.Store(&id.ID)
	return id.ID, nil
}

// Release frees the row (holder ”), if the holder's latest write is still the row's on the
// server that answered it (a graceful shutdown, after the holder stopped serving): the
// others may take it at once instead of waiting it out.
func (m *MySQLLeases) Release(ctx context.Context, tag string, row Row) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	self, err := m.identity(ctx)
	if err != nil {
		return err
	}
	return mysqlcluster.Retry(ctx, nil, func(ctx context.Context) error {
		_, err := m.db.ExecContext(ctx,
			"UPDATE leafd_leader SET holder = '', version = version + 1, expires = UTC_TIMESTAMP(3), server_id = "+self+
				" WHERE biz_tag = ? AND holder = ? AND version = ? AND server_id = ? AND "+self+" = ?",
			tag, row.Holder, row.Version, row.Server, row.At)
		return err
	})
}

// leaseConn returns the lease statements' connection, opening one if needed, and a func
// that discards it after an error.
func (m *MySQLLeases) leaseConn(ctx context.Context) (*sql.Conn, func(error), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.timeout)
		c, err := m.db.Conn(dctx)
		cancel()
		if err != nil {
			return nil, nil, err
		}
		m.conn = c
	}
	c := m.conn
	return c, func(err error) {
		var me *mysql.MySQLError
		if err == nil || errors.Is(err, sql.ErrNoRows) || errors.As(err, &me) || errors.Is(err, mysqlcluster.ErrNoIdentity) {
			return // an answer: the connection works
		}
		m.mu.Lock()
		if m.conn == c {
			m.conn = nil
		}
		m.mu.Unlock()
		_ = c.Close()
	}, nil
}

// Close closes the lease statements' connection (the caller closes the *sql.DB).
func (m *MySQLLeases) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil {
		return nil
	}
	err := m.conn.Close()
	m.conn = nil
	return err
}

// Read is one SELECT of the tag's row and of the database answering.
func (m *MySQLLeases) Read(ctx context.Context, tag string) (Row, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	self, err := m.identity(ctx)
	if err != nil {
		return Row{}, err
	}
	var r Row
	err = mysqlcluster.Retry(ctx, nil, func(ctx context.Context) error {
		c, done, err := m.leaseConn(ctx)
		if err != nil {
			return err
		}
		var longest int64
		var at mysqlcluster.ID // NULL: mysqlcluster.ErrNoIdentity, retried
		var st mysqlcluster.State
		id := m.full.Load()
		err = c.QueryRowContext(ctx,
			"SELECT holder, epoch, version, server_id, "+self+", longest_us, CAST(expires AS CHAR), "+id.State+" FROM leafd_leader WHERE biz_tag = ?", tag).
			Scan(&r.Holder, &r.Epoch, &r.Version, &r.Server, &at, &longest, &r.Expires, &st)
		done(err)
		if err == nil {
			// A new generation (ErrGeneration) reads the row again, under the new identity.
			err = m.cluster.Check(ctx, id.On(m.db), st)
		}
		r.At, r.Longest = int64(at), time.Duration(longest)*time.Microsecond
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, fmt.Errorf("%w: %q", ErrNotOrdered, tag)
	}
	return r, err
}

// Write is one autocommit UPDATE that compares the row's version and server and the database
// answering with old's, so a renewal costs one round trip and its timeout bounds it whole.
// A statement the database rolled back (a certification conflict) runs again.
func (m *MySQLLeases) Write(ctx context.Context, tag string, old Row, holder string, take bool, length time.Duration) (Row, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	self, err := m.identity(ctx)
	if err != nil {
		return Row{}, false, err
	}
	r := written(old, holder, take, length)
	us := length.Microseconds()
	// Holder and epoch are compared too, and a take compares expires: writes of a leafd that
	// does not count versions (an upgrade in progress) then refuse this one as well.
	where := " WHERE biz_tag = ? AND version = ? AND holder = ? AND epoch = ? AND server_id = ? AND " + self + " = ?"
	args := []any{holder, r.Epoch, us, us, us, tag, old.Version, old.Holder, old.Epoch, old.Server, old.At}
	if take && old.Expires != "" {
		where += " AND expires = ?"
		args = append(args, old.Expires)
	}
	var n int64
	err = mysqlcluster.Retry(ctx, nil, func(ctx context.Context) error {
		c, done, err := m.leaseConn(ctx)
		if err != nil {
			return err
		}
		res, err := c.ExecContext(ctx,
			"UPDATE leafd_leader SET holder = ?, epoch = ?, version = version + 1, expires = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND,"+
				" lease_us = ?, longest_us = GREATEST(longest_us, ?), server_id = "+self+where, args...)
		done(err)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return Row{}, false, err
	}
	return r, n == 1, nil
}

var _ Store = (*MySQLLeases)(nil)
var _ Releaser = (*MySQLLeases)(nil)
