package ordered

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// mysqlCreateLeader is leafd's table of ORDERED tags and their leader leases: a row marks the
// tag as ordered; expires is on the database clock (NOW(3)), so the instances' clocks never
// decide who holds it.
const mysqlCreateLeader = "CREATE TABLE IF NOT EXISTS `leafd_leader` (\n" +
	"  `biz_tag` varchar(128) NOT NULL,\n" +
	"  `holder` varchar(255) NOT NULL DEFAULT '' COMMENT 'the instance holding the lease',\n" +
	"  `epoch` bigint NOT NULL DEFAULT 0 COMMENT 'term: grows by one at each change of holder or lapse',\n" +
	"  `expires` datetime(3) NOT NULL DEFAULT '1970-01-02 00:00:00.000' COMMENT 'database clock',\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

// MySQLLeases is the lease Store on MySQL/MariaDB (the database of the segment store).
type MySQLLeases struct {
	db      *sql.DB
	timeout time.Duration
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
	return err
}

// MarkOrdered records tag as ORDERED (idempotent).
func (m *MySQLLeases) MarkOrdered(ctx context.Context, tag string) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	_, err := m.db.ExecContext(ctx, "INSERT IGNORE INTO leafd_leader (biz_tag) VALUES (?)", tag)
	return err
}

// Acquire is one transaction: the row is locked, its liveness judged by NOW(3), and the lease
// renewed (same holder, live: same epoch), taken (lapsed: next epoch) or refused (live, held
// by another).
func (m *MySQLLeases) Acquire(ctx context.Context, tag, holder string, length time.Duration) (Grant, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return Grant{}, err
	}
	defer func() { _ = tx.Rollback() }()
	var cur string
	var epoch int64
	var live bool
	err = tx.QueryRowContext(ctx,
		"SELECT holder, epoch, expires >= NOW(3) FROM leafd_leader WHERE biz_tag = ? FOR UPDATE", tag).Scan(&cur, &epoch, &live)
	if errors.Is(err, sql.ErrNoRows) {
		return Grant{}, fmt.Errorf("%w: %q", ErrNotOrdered, tag)
	}
	if err != nil {
		return Grant{}, err
	}
	if live && cur != holder {
		return Grant{Holder: cur, Epoch: epoch}, nil
	}
	if !live {
		// A lapsed lease is a new term even for its last holder: it stopped serving at its
		// deadline, and must start above every range of the earlier term again.
		epoch++
	}
	_, err = tx.ExecContext(ctx,
		"UPDATE leafd_leader SET holder = ?, epoch = ?, expires = NOW(3) + INTERVAL ? MICROSECOND WHERE biz_tag = ?",
		holder, epoch, length.Microseconds(), tag)
	if err != nil {
		return Grant{}, err
	}
	if err := tx.Commit(); err != nil {
		return Grant{}, err
	}
	return Grant{Granted: true, Epoch: epoch, Holder: holder}, nil
}
