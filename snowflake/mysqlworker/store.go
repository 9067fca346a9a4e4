package mysqlworker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/internal/storeerr/mysqlerr"
)

// Table is the name of the worker-id table, in the database of the DSN, beside leaf_alloc.
const Table = "leafd_worker"

// CreateTable is the table's DDL (run as CREATE TABLE IF NOT EXISTS on the first acquisition).
//
//	worker_id      the snowflake worker id; the primary key backs every INSERT of a new id
//	holder         who holds it (advertise address or host name), for operators
//	instance       the holder's data dir (its snowflake.json instance id), for operators
//	token          random per acquisition; '' once released. Every write of the holder is
//	               fenced on (token, epoch)
//	epoch          +1 at every acquisition (and re-acquisition after a self-fence)
//	version        +1 at every write; a taker's compare-and-set is fenced on it
//	lease_expires  the lease, on the DATABASE's clock (UTC_TIMESTAMP(3) + lease at each renewal)
//	reserved_until Unix ms on the holder's clock: every ID issued with this worker id by the
//	               holders so far is in a millisecond below it (the time bound)
//	layout         the ID layout (epoch and bit widths) the id was used with
//	updated_at     the database's clock at the last write, for operators
const CreateTable = "CREATE TABLE IF NOT EXISTS `" + Table + "` (\n" +
	"  `worker_id` INT NOT NULL,\n" +
	"  `holder` VARCHAR(255) NOT NULL DEFAULT '',\n" +
	"  `instance` VARCHAR(64) NOT NULL DEFAULT '',\n" +
	"  `token` VARCHAR(64) NOT NULL DEFAULT '',\n" +
	"  `epoch` BIGINT NOT NULL DEFAULT 0,\n" +
	"  `version` BIGINT NOT NULL DEFAULT 0,\n" +
	"  `lease_expires` DATETIME(3) NOT NULL,\n" +
	"  `reserved_until` BIGINT NOT NULL DEFAULT 0,\n" +
	"  `layout` VARCHAR(128) NOT NULL DEFAULT '',\n" +
	"  `updated_at` DATETIME(3) NOT NULL,\n" +
	"  PRIMARY KEY (`worker_id`)\n" +
	") ENGINE=InnoDB"

// row is one row of the table as the source reads it.
type row struct {
	ID            int64
	Holder        string
	Instance      string
	Token         string
	Epoch         int64
	Version       int64
	Free          bool // released (token '') or lease_expires <= UTC_TIMESTAMP(3), on the database's clock
	ReservedUntil int64
	Layout        string
}

// claim is what an acquisition writes.
type claim struct {
	Holder, Instance, Token, Layout string
	Lease                           time.Duration
}

// store is the table's operations. Every write returns ok=false when its condition matched no
// row, and an error when the outcome is unknown (timed out, connection lost: maybe applied).
type store interface {
	Ensure(ctx context.Context) error
	List(ctx context.Context) ([]row, error)
	Get(ctx context.Context, id int64) (row, bool, error)
	// Take is the taker's compare-and-set: the row must still have version and be free.
	Take(ctx context.Context, id, version int64, c claim) (bool, error)
	// Insert adds a row for a new id; false when the id exists (the primary key).
	Insert(ctx context.Context, id int64, c claim) (bool, error)
	// Renew extends the lease and raises reserved_until (never lowers it), fenced on (token, epoch).
	Renew(ctx context.Context, id, epoch int64, token string, untilMs int64, lease time.Duration) (bool, error)
	// Reclaim re-acquires the holder's own row after a self-fence: epoch+1, fenced on (token, epoch).
	Reclaim(ctx context.Context, id, epoch int64, token string, lease time.Duration) (bool, error)
	// Release frees the row (token ''), raising reserved_until, fenced on (token, epoch).
	Release(ctx context.Context, id, epoch int64, token string, untilMs int64) (bool, error)
	Close() error
}

// sqlStore is the store on MySQL/MariaDB.
type sqlStore struct {
	db      *sql.DB
	timeout time.Duration
}

// driverConfig applies leafd's driver settings where the DSN sets none: dial/read/write timeouts
// (a hung database is noticed within QueryTimeout), a UTC session (UTC_TIMESTAMP(3) and DATETIME compare in
// one zone whatever the server's default), interpolateParams (one round trip per statement).
func driverConfig(dsn string, timeout time.Duration) (*mysql.Config, error) {
	dcfg, err := mysqlerr.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("snowflake: %w", err)
	}
	if dcfg.Timeout == 0 {
		dcfg.Timeout = timeout
	}
	if dcfg.ReadTimeout == 0 {
		dcfg.ReadTimeout = timeout
	}
	if dcfg.WriteTimeout == 0 {
		dcfg.WriteTimeout = timeout
	}
	if dcfg.Params == nil {
		dcfg.Params = map[string]string{}
	}
	if _, ok := dcfg.Params["time_zone"]; !ok {
		dcfg.Params["time_zone"] = "'+00:00'"
	}
	if _, ok := dcfg.Params["wait_timeout"]; !ok {
		dcfg.Params["wait_timeout"] = strconv.Itoa(max(2, int(2*timeout/time.Second)))
	}
	if !strings.Contains(dsn, "interpolateParams") {
		dcfg.InterpolateParams = true
	}
	return dcfg, nil
}

func openSQL(dsn string, timeout time.Duration) (*sqlStore, error) {
	dcfg, err := driverConfig(dsn, timeout)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(dcfg)
	if err != nil {
		return nil, fmt.Errorf("snowflake: mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(time.Minute)
	// Renewals every third of the lease keep connections busy, so the idle limit never ends
	// them: a lifetime bounds how long one stays on a server that a virtual IP or DNS name no
	// longer points at (a failover that did not cut the old primary's sessions).
	db.SetConnMaxLifetime(time.Minute)
	return &sqlStore{db: db, timeout: timeout}, nil
}

func (s *sqlStore) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

func (s *sqlStore) Close() error { return s.db.Close() }

func (s *sqlStore) Ensure(ctx context.Context) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.db.ExecContext(ctx, CreateTable)
	return err
}

const selectCols = "SELECT worker_id, holder, instance, token, epoch, version, " +
	"(token = '' OR lease_expires <= UTC_TIMESTAMP(3)), reserved_until, layout FROM `" + Table + "`"

func scanRow(sc interface{ Scan(...any) error }) (row, error) {
	var r row
	err := sc.Scan(&r.ID, &r.Holder, &r.Instance, &r.Token, &r.Epoch, &r.Version, &r.Free, &r.ReservedUntil, &r.Layout)
	return r, err
}

func (s *sqlStore) List(ctx context.Context) ([]row, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, selectCols+" ORDER BY worker_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *sqlStore) Get(ctx context.Context, id int64) (row, bool, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	r, err := scanRow(s.db.QueryRowContext(ctx, selectCols+" WHERE worker_id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	return r, err == nil, err
}

// exec runs a write and reports whether it changed exactly one row. Every write bumps version,
// so a matched row is a changed row. A write the server rolled back whole (a certification
// conflict on a Galera cluster, a deadlock victim: applied nowhere) runs again
// (mysqlcluster.Retry); every write is a compare-and-set, so running it again is the same as
// running it once.
func (s *sqlStore) exec(ctx context.Context, q string, args ...any) (bool, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var res sql.Result
	err := mysqlcluster.Retry(ctx, nil, func(ctx context.Context) error {
		var err error
		res, err = s.db.ExecContext(ctx, q, args...)
		return err
	})
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

func us(d time.Duration) int64 { return d.Microseconds() }

func (s *sqlStore) Take(ctx context.Context, id, version int64, c claim) (bool, error) {
	return s.exec(ctx, "UPDATE `"+Table+"` SET holder = ?, instance = ?, token = ?, epoch = epoch + 1, version = version + 1, "+
		"lease_expires = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, layout = ?, updated_at = UTC_TIMESTAMP(3) "+
		"WHERE worker_id = ? AND version = ? AND (token = '' OR lease_expires <= UTC_TIMESTAMP(3))",
		c.Holder, c.Instance, c.Token, us(c.Lease), c.Layout, id, version)
}

func (s *sqlStore) Insert(ctx context.Context, id int64, c claim) (bool, error) {
	ok, err := s.exec(ctx, "INSERT INTO `"+Table+"` (worker_id, holder, instance, token, epoch, version, lease_expires, reserved_until, layout, updated_at) "+
		"VALUES (?, ?, ?, ?, 1, 1, UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, 0, ?, UTC_TIMESTAMP(3))",
		id, c.Holder, c.Instance, c.Token, us(c.Lease), c.Layout)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY: the primary key says someone has it
		return false, nil
	}
	return ok, err
}

func (s *sqlStore) Renew(ctx context.Context, id, epoch int64, token string, untilMs int64, lease time.Duration) (bool, error) {
	return s.exec(ctx, "UPDATE `"+Table+"` SET lease_expires = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, reserved_until = GREATEST(reserved_until, ?), "+
		"version = version + 1, updated_at = UTC_TIMESTAMP(3) WHERE worker_id = ? AND epoch = ? AND token = ?",
		us(lease), untilMs, id, epoch, token)
}

func (s *sqlStore) Reclaim(ctx context.Context, id, epoch int64, token string, lease time.Duration) (bool, error) {
	return s.exec(ctx, "UPDATE `"+Table+"` SET lease_expires = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, epoch = epoch + 1, "+
		"version = version + 1, updated_at = UTC_TIMESTAMP(3) WHERE worker_id = ? AND epoch = ? AND token = ?",
		us(lease), id, epoch, token)
}

func (s *sqlStore) Release(ctx context.Context, id, epoch int64, token string, untilMs int64) (bool, error) {
	return s.exec(ctx, "UPDATE `"+Table+"` SET token = '', lease_expires = UTC_TIMESTAMP(3), reserved_until = GREATEST(reserved_until, ?), "+
		"version = version + 1, updated_at = UTC_TIMESTAMP(3) WHERE worker_id = ? AND epoch = ? AND token = ?",
		untilMs, id, epoch, token)
}
