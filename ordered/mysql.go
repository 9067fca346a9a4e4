package ordered

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leafd/leafd/internal/mysqlcluster"
)

// mysqlCreateLeader is leafd's table of ORDERED tags and their leader leases: a row marks the
// tag as ordered; expires is on the database clock (UTC_TIMESTAMP(3)), so the instances' clocks never
// decide who holds it.
const mysqlCreateLeader = "CREATE TABLE IF NOT EXISTS `leafd_leader` (\n" +
	"  `biz_tag` varchar(128) NOT NULL,\n" +
	"  `holder` varchar(255) NOT NULL DEFAULT '' COMMENT 'the instance holding the lease',\n" +
	"  `epoch` bigint NOT NULL DEFAULT 0 COMMENT 'term: grows by one at each change of holder or lapse',\n" +
	"  `expires` datetime(3) NOT NULL DEFAULT '1970-01-02 00:00:00.000' COMMENT 'database clock',\n" +
	"  `server_id` bigint NOT NULL DEFAULT 0 COMMENT '@@server_id of the server that granted the lease (a change: a failover); on Galera, of the cluster',\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

// MySQLLeases is the lease Store on MySQL/MariaDB (the database of the segment store).
type MySQLLeases struct {
	db      *sql.DB
	timeout time.Duration
	ensured atomic.Bool            // leafd_leader exists
	ident   atomic.Pointer[string] // SQL of the database's identity (mysqlcluster), once known
}

// NewMySQLLeases uses db (owned by the caller) with timeout per call.
func NewMySQLLeases(db *sql.DB, timeout time.Duration) *MySQLLeases {
	return &MySQLLeases{db: db, timeout: timeout}
}

// EnsureTable creates leafd_leader if missing.
func (m *MySQLLeases) EnsureTable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	_, err := m.db.ExecContext(ctx, mysqlCreateLeader)
	if err == nil {
		m.ensured.Store(true)
	}
	return err
}

// MarkOrdered records tag as ORDERED (idempotent).
func (m *MySQLLeases) MarkOrdered(ctx context.Context, tag string) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	_, err := m.db.ExecContext(ctx, "INSERT IGNORE INTO leafd_leader (biz_tag) VALUES (?)", tag)
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
		// own would make a second leader of one counter (found by the review of issue 19).
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

// Release ends holder's lease of tag on the database clock (a graceful shutdown, after the
// holder stopped serving it): the others may take it at once instead of waiting it out.
func (m *MySQLLeases) Release(ctx context.Context, tag, holder string) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	_, err := m.db.ExecContext(ctx,
		"UPDATE leafd_leader SET expires = LEAST(expires, UTC_TIMESTAMP(3) - INTERVAL 1000 MICROSECOND) WHERE biz_tag = ? AND holder = ?", tag, holder)
	return err
}

// Acquire is one transaction: the row is locked, its liveness judged by UTC_TIMESTAMP(3), and the lease
// renewed (same holder, live: same epoch), taken (lapsed: next epoch) or refused (live, held
// by another). A row last granted by another server (server_id: a failover since, perhaps to
// a replica that missed the latest renewals) is a new term that must settle (Grant.Settle).
//
// The database's identity is the cluster's on a Galera member (identExpr): a renewal through
// another member is no failover. A transaction the server rolled back whole (a certification
// conflict at COMMIT, a deadlock victim) runs again (mysqlcluster.Retry).
func (m *MySQLLeases) Acquire(ctx context.Context, tag, holder string, length time.Duration) (g Grant, err error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	self, err := m.identExpr(ctx)
	if err != nil {
		return Grant{}, err
	}
	err = mysqlcluster.Retry(ctx, nil, func(ctx context.Context) error {
		g, err = m.acquire(ctx, tag, holder, length, self)
		return err
	})
	return g, err
}

// identExpr is the SQL of the database's identity, one BIGINT (mysqlcluster.Detect).
func (m *MySQLLeases) identExpr(ctx context.Context) (string, error) {
	if p := m.ident.Load(); p != nil {
		return *p, nil
	}
	id, err := mysqlcluster.Detect(ctx, m.db)
	if err != nil {
		return "", err
	}
	m.ident.Store(&id.ID)
	return id.ID, nil
}

func (m *MySQLLeases) acquire(ctx context.Context, tag, holder string, length time.Duration, self string) (Grant, error) {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return Grant{}, err
	}
	defer func() { _ = tx.Rollback() }()
	var cur string
	var epoch, server, left int64
	var me mysqlcluster.ID // NULL: mysqlcluster.ErrNoIdentity, retried
	var live bool
	err = tx.QueryRowContext(ctx,
		"SELECT holder, epoch, expires >= UTC_TIMESTAMP(3), server_id, "+self+", GREATEST(0, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(3), expires)) "+
			"FROM leafd_leader WHERE biz_tag = ? FOR UPDATE", tag).Scan(&cur, &epoch, &live, &server, &me, &left)
	if errors.Is(err, sql.ErrNoRows) {
		return Grant{}, fmt.Errorf("%w: %q", ErrNotOrdered, tag)
	}
	if err != nil {
		return Grant{}, err
	}
	moved := cur != "" && server != int64(me)
	if live && cur != holder && !moved {
		return Grant{Holder: cur, Epoch: epoch, Remaining: time.Duration(left) * time.Microsecond}, nil
	}
	if !live || moved {
		// A lapsed lease is a new term even for its last holder: it stopped serving at its
		// deadline, and must start above every range of the earlier term again. So is a
		// lease granted by another server: this one's row may be stale.
		epoch++
	}
	_, err = tx.ExecContext(ctx,
		"UPDATE leafd_leader SET holder = ?, epoch = ?, expires = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, server_id = "+self+" WHERE biz_tag = ?",
		holder, epoch, length.Microseconds(), tag)
	if err != nil {
		return Grant{}, err
	}
	if err := tx.Commit(); err != nil {
		return Grant{}, err
	}
	return Grant{Granted: true, Epoch: epoch, Holder: holder, Remaining: length, Settle: moved}, nil
}
