package segment

// This file is a little over 500 lines on purpose: it holds every SQL statement of the
// MySQL store and the transaction each runs in, so the locking order can be read in one place
// (the failover fence's statements are in failover.go).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/internal/quietlog"
	"github.com/leafd/leafd/internal/storeerr"
	"github.com/leafd/leafd/ordered"
)

var (
	_ Store          = (*MySQLStore)(nil)
	_ maxIDReader    = (*MySQLStore)(nil)
	_ floorAllocator = (*MySQLStore)(nil)
)

// MySQL server error numbers the store maps to sentinels.
const (
	mysqlErrDupEntry       = 1062 // ER_DUP_ENTRY
	mysqlErrDataOutOfRange = 1690 // ER_DATA_OUT_OF_RANGE: max_id + step overflows BIGINT
	mysqlErrNoSuchTable    = 1146 // ER_NO_SUCH_TABLE
)

// mysqlCreateTable is Leaf's DDL, unchanged, so that a database created by leafd can be used
// by Leaf and the other way round.
const mysqlCreateTable = "CREATE TABLE IF NOT EXISTS `leaf_alloc` (\n" +
	"  `biz_tag` varchar(128) NOT NULL DEFAULT '',\n" +
	"  `max_id` bigint(20) NOT NULL DEFAULT '1',\n" +
	"  `step` int(11) NOT NULL,\n" +
	"  `description` varchar(256) DEFAULT NULL,\n" +
	"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

// MySQLConfig configures OpenMySQL. Start from DefaultMySQLConfig: a zero count or duration
// means its default, but the zero CreateTable and RequireSemiSync are false and the zero
// FailoverAllocs turns the failover fence off.
type MySQLConfig struct {
	// DSN is a go-sql-driver/mysql DSN, e.g. leaf:pw@tcp(db:3306)/leaf. The driver timeouts
	// timeout (dial), readTimeout and writeTimeout are set to QueryTimeout when the DSN does not
	// set them, so that a dead or hung server is noticed even outside a context.
	DSN string
	// MaxOpenConns bounds the connections to the database. Default 8.
	MaxOpenConns int
	// MaxIdleConns is how many idle connections are kept. Default MaxOpenConns.
	MaxIdleConns int
	// ConnMaxLifetime recycles connections older than this (below typical proxy and server
	// idle limits). Default 3 minutes.
	ConnMaxLifetime time.Duration
	// QueryTimeout bounds every store call (a whole allocation transaction included). Default 3s.
	QueryTimeout time.Duration
	// CreateTable creates leaf_alloc with Leaf's DDL when it is missing (CREATE TABLE IF NOT
	// EXISTS, at open and, until it succeeds, before each call). Default true. It also creates
	// leafd's table leafd_fence when FailoverAllocs is set.
	CreateTable bool
	// FailoverAllocs is the most allocations per tag a database failover may lose (a replica
	// promoted before it received them). When an allocation finds that the database is not the
	// one that granted the tag's last range (the failover fence, docs/MYSQL.md), it first moves
	// max_id forward by FailoverAllocs × max(MaxStep, the tag's stored step). Default 20; 0
	// turns the fence off (Leaf's behaviour: a lagging replica hands out ranges again).
	FailoverAllocs int64
	// MaxStep is the largest step any instance may use for an allocation (the generator's
	// MaxStep; Leaf's is 1,000,000). Default 1,000,000.
	MaxStep int64
	// RequireSemiSync refuses to lease (ErrUnavailable) unless the primary replicates
	// semi-synchronously (Rpl_semi_sync_master_status or _source_status ON) before the
	// allocation and no commit went unacknowledged while it ran. Default false.
	RequireSemiSync bool
	// Now is the clock of the instants recorded at takeovers of the database fence row, which
	// decide which shaped tags' rows a takeover may have lost (shaperow.go): the clock that
	// picks their periods. Default time.Now.
	Now func() time.Time
	// Cluster is what this process saw of the Galera clusters behind the DSN (shared with
	// the other stores of the process): a cluster restarted from a member that lacked
	// commits is then another database to the fence. nil: not checked.
	Cluster *mysqlcluster.History
}

// DefaultMySQLConfig returns the defaults; set DSN before use.
func DefaultMySQLConfig() MySQLConfig {
	return MySQLConfig{
		MaxOpenConns:    8,
		MaxIdleConns:    8,
		ConnMaxLifetime: 3 * time.Minute,
		QueryTimeout:    3 * time.Second,
		CreateTable:     true,
		FailoverAllocs:  20,
		MaxStep:         1_000_000,
	}
}

// Validate reports the first invalid field.
func (c MySQLConfig) Validate() error {
	if c.DSN == "" {
		return errors.New("segment: mysql DSN is empty")
	}
	if _, err := storeerr.ParseDSN(c.DSN); err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	switch {
	case c.MaxOpenConns < 0:
		return fmt.Errorf("segment: mysql MaxOpenConns %d is negative", c.MaxOpenConns)
	case c.MaxIdleConns < 0:
		return fmt.Errorf("segment: mysql MaxIdleConns %d is negative", c.MaxIdleConns)
	case c.ConnMaxLifetime < 0:
		return fmt.Errorf("segment: mysql ConnMaxLifetime %v is negative", c.ConnMaxLifetime)
	case c.QueryTimeout < 0:
		return fmt.Errorf("segment: mysql QueryTimeout %v is negative", c.QueryTimeout)
	case c.FailoverAllocs < 0:
		return fmt.Errorf("segment: mysql FailoverAllocs %d is negative", c.FailoverAllocs)
	case c.MaxStep < 0:
		return fmt.Errorf("segment: mysql MaxStep %d is negative", c.MaxStep)
	case c.FailoverAllocs > 0 && max(c.MaxStep, 1) > maxRangeEnd/4/c.FailoverAllocs:
		return fmt.Errorf("segment: mysql FailoverAllocs %d × MaxStep %d is too large a gap", c.FailoverAllocs, c.MaxStep)
	}
	return nil
}

func (c MySQLConfig) withDefaults() MySQLConfig {
	d := DefaultMySQLConfig()
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = d.MaxOpenConns
	}
	if c.MaxIdleConns == 0 {
		c.MaxIdleConns = c.MaxOpenConns
	}
	if c.ConnMaxLifetime == 0 {
		c.ConnMaxLifetime = d.ConnMaxLifetime
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = d.QueryTimeout
	}
	if c.MaxStep == 0 {
		c.MaxStep = d.MaxStep
	}
	return c
}

// idleSessionTimeout is the wait_timeout of the store's sessions: how long the server keeps a
// session that sends nothing. Every store call ends within QueryTimeout (its context), so a
// session idle for longer inside a transaction belongs to a process that stopped running
// (SIGSTOP, a VM or GC pause, a partition that keeps the TCP connection up); ending it rolls
// its transaction back and frees the tag's row lock for the other instances, instead of the
// server's default of 8 hours. Twice QueryTimeout, at least 2 s, in whole seconds.
func idleSessionTimeout(query time.Duration) time.Duration {
	return max(2*query, 2*time.Second).Round(time.Second)
}

// driverConfig is the driver's configuration for cfg (with its defaults applied): the DSN, and
// for each of these the DSN does not set, leafd's choice:
//   - timeout, readTimeout, writeTimeout: QueryTimeout, so a hung database is noticed;
//   - wait_timeout: idleSessionTimeout, so a paused holder's row lock is released;
//   - interpolateParams=true: statements with arguments go as text in one round trip each,
//     instead of a prepare and an execute (an allocation is 6 round trips instead of about 10,
//     which is what a far database's refill time is made of). The driver falls back to
//     prepared statements for the character sets where interpolation is not safe (it refuses
//     to interpolate them), and escapes by the session's NO_BACKSLASH_ESCAPES mode.
func driverConfig(cfg MySQLConfig) (*mysql.Config, error) {
	dcfg, err := storeerr.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("segment: %w", err)
	}
	if dcfg.Timeout == 0 {
		dcfg.Timeout = cfg.QueryTimeout
	}
	if dcfg.ReadTimeout == 0 {
		dcfg.ReadTimeout = cfg.QueryTimeout
	}
	if dcfg.WriteTimeout == 0 {
		dcfg.WriteTimeout = cfg.QueryTimeout
	}
	// A session that stops sending (its process paused inside an allocation) is ended by the
	// server after idle, which releases the row locks of its transaction (idleSessionTimeout).
	// The driver sends it as SET wait_timeout on each new connection; a DSN that sets it wins.
	if _, ok := dcfg.Params["wait_timeout"]; !ok {
		if dcfg.Params == nil {
			dcfg.Params = map[string]string{}
		}
		dcfg.Params["wait_timeout"] = strconv.FormatInt(int64(idleSessionTimeout(cfg.QueryTimeout)/time.Second), 10)
	}
	// ParseDSN cannot tell an absent interpolateParams from false; the DSN's text can.
	if !dsnSets(cfg.DSN, "interpolateParams") {
		dcfg.InterpolateParams = true
	}
	return dcfg, nil
}

// dsnSets reports whether the DSN's parameters (after the '?' that follows the last '/', as
// the driver parses them) name param.
func dsnSets(dsn, param string) bool {
	rest := dsn[strings.LastIndexByte(dsn, '/')+1:]
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		return false
	}
	for _, kv := range strings.Split(rest[q+1:], "&") {
		if k, _, _ := strings.Cut(kv, "="); k == param {
			return true
		}
	}
	return false
}

// MySQLStore leases ranges from Leaf's leaf_alloc table in MySQL 5.7/8 or MariaDB 10.x,
// shared by any number of leafd (and Leaf) instances. An allocation is Leaf's UPDATE and
// SELECT in one transaction on one connection; it returns only after COMMIT succeeded, and
// any failure (timeout, connection reset, server error) is an error, never a partial result.
// When the outcome of COMMIT is unknown the range is lost (a gap), never reused.
//
// MySQLStore is safe for concurrent use.
type MySQLStore struct {
	db      *sql.DB
	timeout time.Duration
	log     *zap.Logger
	quiet   *quietlog.Log

	createTable bool
	tableReady  atomic.Bool   // CREATE TABLE done, or refused by the server: stop trying
	shapeReady  atomic.Bool   // CREATE TABLE leafd_tag_shape done or refused (shapestore.go)
	tableSem    chan struct{} // one CREATE TABLE attempt at a time, abandoned on ctx expiry

	failoverAllocs  int64 // 0: no fence
	maxStep         int64
	requireSemiSync bool
	ident           atomic.Pointer[string] // SQL of the server identity, once known
	identID         atomic.Pointer[string] // its one-column form (mysqlcluster.Ident.ID)
	identFull       atomic.Pointer[mysqlcluster.Ident]
	cluster         *mysqlcluster.History
	gapRecorded     atomic.Bool   // this instance's gap is in the database fence row
	deadlocks       atomic.Uint64 // rolled back transactions run again (retryDeadlock)

	epochMu sync.Mutex
	epochs  map[string]int64 // per tag: highest fence epoch seen committed
	pending map[string]int64 // per tag: epoch of a takeover not yet committed
	// per tag: when a refusal as not adopted was last logged
	refusedAt map[string]time.Time

	now     func() time.Time
	creates createGroup // creations committed together (mysqlbatch.go)
	hooks   mysqlHooks  // test seams; zero in production
}

// mysqlHooks are seams for tests, to order two transactions exactly; nil in production.
type mysqlHooks struct {
	afterShapeLock  func(ctx context.Context) error // Create: after the shape check's lock, before the insert
	afterShapeCheck func(ctx context.Context) error // CreateShape: after leaf_alloc's lock, before the insert
}

// createIsolation is the isolation level of every creation transaction (Create, its batches,
// CreateShape): REPEATABLE READ whatever the server's or the DSN's default, because the
// exclusion of a plain and a shaped tag of one name rests on gap locks (SELECT ... FOR UPDATE
// of a missing key), which READ COMMITTED does not take (TestCreateExclusionRepeatableRead).
func (s *MySQLStore) createIsolation() sql.IsolationLevel { return sql.LevelRepeatableRead }

// OpenMySQL prepares the connection pool and tries once, within QueryTimeout, to create the
// table. It does not fail when the database is unreachable: an instance started during a
// database outage stays up, its calls fail until the database returns, and table creation is
// retried on the next call. It fails only for an invalid configuration.
func OpenMySQL(ctx context.Context, cfg MySQLConfig, log *zap.Logger) (*MySQLStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	dcfg, err := driverConfig(cfg)
	if err != nil {
		return nil, err
	}
	idle := idleSessionTimeout(cfg.QueryTimeout)
	log = log.With(zap.String("store", "mysql"), zap.String("addr", dcfg.Addr), zap.String("db", dcfg.DBName))
	dcfg.Logger = mysqlDriverLog{log}
	conn, err := mysql.NewConnector(dcfg)
	if err != nil {
		return nil, fmt.Errorf("segment: mysql DSN: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxIdleConns)
	db.SetConnMaxLifetime(cfg.ConnMaxLifetime)
	// Idle pooled connections are closed before the server's wait_timeout ends them.
	db.SetConnMaxIdleTime(idle / 3) // the pool checks once a second at most

	s := &MySQLStore{
		db:          db,
		timeout:     cfg.QueryTimeout,
		log:         log,
		quiet:       quietlog.New(log, quietlog.DefaultEvery, nil),
		createTable: cfg.CreateTable,
		tableSem:    make(chan struct{}, 1),

		failoverAllocs:  cfg.FailoverAllocs,
		maxStep:         cfg.MaxStep,
		requireSemiSync: cfg.RequireSemiSync,
		cluster:         cfg.Cluster,
		now:             cfg.Now,
		epochs:          map[string]int64{},
		pending:         map[string]int64{},
		refusedAt:       map[string]time.Time{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.createTable {
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		if err := s.ensureTable(ctx); err != nil {
			s.log.Warn("mysql unreachable at start; serving will begin when it answers", zap.Error(err))
		} else if s.failoverAllocs > 0 {
			s.ensureGap(ctx)
		}
	} else {
		s.tableReady.Store(true)
	}
	return s, nil
}

// ensureTable runs CREATE TABLE IF NOT EXISTS until it succeeds. A refusal by the server
// (e.g. no CREATE privilege on a database where the table exists) is logged and not retried
// until a call finds the table missing (see wrap); a connection failure is returned and
// retried on the next call.
func (s *MySQLStore) ensureTable(ctx context.Context) error {
	if s.tableReady.Load() {
		return nil
	}
	select {
	case s.tableSem <- struct{}{}:
		defer func() { <-s.tableSem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.tableReady.Load() {
		return nil
	}
	_, err := s.db.ExecContext(ctx, mysqlCreateTable)
	if err == nil && s.failoverAllocs > 0 {
		_, err = s.db.ExecContext(ctx, mysqlCreateFence)
		if err == nil {
			err = s.ensureMaxEnd(ctx)
		}
	}
	var me *mysql.MySQLError
	switch {
	case err == nil:
		s.tableReady.Store(true)
		return nil
	case errors.As(err, &me):
		s.tableReady.Store(true)
		s.log.Warn("cannot create table leaf_alloc or leafd_fence; using them as they are", zap.Error(err))
		return nil
	default:
		return err
	}
}

// Allocate adds step (the stored step when step <= 0) to the tag's max_id and reads the row
// back in the same transaction, then commits; all within QueryTimeout. With the failover
// fence on, the same transaction first checks the fence (see failover.go).
func (s *MySQLStore) Allocate(ctx context.Context, tag string, step int64) (Alloc, error) {
	return s.AllocateAbove(ctx, tag, step, 0)
}

// AllocateAbove is Allocate that refuses a range starting below floor (the caller's
// regression mark; 0: none) inside the transaction: it rolls back, so that a refused lease
// never moves max_id, and returns an error matching ErrRegression.
func (s *MySQLStore) AllocateAbove(ctx context.Context, tag string, step, floor int64) (Alloc, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_ = s.ensureTable(ctx) // a failure here shows again, as the real error, below
	var (
		tx     *sql.Tx
		a      Alloc
		before semiSync
	)
	// The whole transaction, COMMIT included; one the server rolled back whole (a deadlock
	// victim, a certification conflict at COMMIT on a multi-writer cluster: nothing granted
	// on any member) runs again, a bounded number of times (retryDeadlock).
	op := "allocate"
	err := s.retryDeadlock(ctx, op, tag, func(ctx context.Context) error {
		var err error
		op = "allocate"
		if tx, a, before, err = s.allocateUncommitted(ctx, tag, step, floor); err != nil {
			return err
		}
		if err = tx.Commit(); err != nil {
			op = "allocate: commit"
			s.dropPending(tag)
		}
		return err
	})
	if err != nil {
		var below *belowFloorError
		if errors.As(err, &below) {
			return Alloc{}, err
		}
		return Alloc{}, s.wrap(op, tag, err)
	}
	s.commitEpoch(tag)
	if s.requireSemiSync {
		after, err := readSemiSync(ctx, s.db)
		switch {
		case err != nil:
			return Alloc{}, s.wrap("allocate: semi-sync status after commit", tag, err)
		case !after.on || after.noTx != before.noTx:
			// Committed but perhaps not on any replica: the range is dropped (a gap).
			return Alloc{}, errSemiSyncOff(tag, "a commit was not acknowledged by a replica while this allocation ran")
		}
	}
	return a, nil
}

// allocateUncommitted is AllocateAbove up to COMMIT: on success the transaction is left open
// for the caller to commit; on error it is rolled back (the error is not yet wrapped, except
// by the fence's and semi-sync's own words).
func (s *MySQLStore) allocateUncommitted(ctx context.Context, tag string, step, floor int64) (*sql.Tx, Alloc, semiSync, error) {
	if err := s.beforeTx(ctx); err != nil {
		return nil, Alloc{}, semiSync{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, Alloc{}, semiSync{}, err
	}
	var before semiSync
	if s.requireSemiSync {
		if before, err = readSemiSync(ctx, tx); err != nil {
			_ = tx.Rollback()
			return nil, Alloc{}, semiSync{}, fmt.Errorf("semi-sync status: %w", err)
		}
		if !before.known || !before.on {
			_ = tx.Rollback()
			what := "the primary has fallen back to asynchronous replication (Rpl_semi_sync_master_status OFF)"
			if !before.known {
				what = "semi-sync is not available on the server"
			}
			return nil, Alloc{}, semiSync{}, errSemiSyncOff(tag, what)
		}
	}
	var a Alloc
	if s.failoverAllocs > 0 {
		row, ferr := s.fence(ctx, tx, tag, step, floor)
		if ferr != nil {
			_ = tx.Rollback()
			s.dropPending(tag)
			return nil, Alloc{}, semiSync{}, fmt.Errorf("fence: %w", ferr)
		}
		a, err = s.allocateLocked(ctx, tx, tag, step, row)
	} else {
		a, err = s.allocateTx(ctx, tx, tag, step)
	}
	if err == nil && floor > 0 {
		size := step
		if size <= 0 {
			size = a.Step
		}
		if start := a.MaxID - size; start < floor {
			err = &belowFloorError{tag: tag, alloc: a, start: start, floor: floor}
		}
	}
	if err != nil {
		_ = tx.Rollback()
		s.dropPending(tag)
		return nil, Alloc{}, semiSync{}, err
	}
	return tx, a, before, nil
}

// mysqlErrDeadlock is ER_LOCK_DEADLOCK: a deadlock victim, or a certification conflict on
// Galera; the server rolled the transaction back whole.
const mysqlErrDeadlock = 1213

// deadlockRetries bounds retryDeadlock: a transaction is tried at most this many times.
const deadlockRetries = mysqlcluster.Attempts

// retryDeadlock runs fn, a whole transaction with its COMMIT, again when the server rolled
// it back whole (mysqlcluster.RolledBack: a deadlock victim, or a certification conflict on
// a multi-writer cluster, which arrives at COMMIT too): nothing of it was applied, so
// running it again is the same as running it once. At most mysqlcluster.Attempts attempts
// with a short random pause before each retry, never past ctx (mysqlcluster.Retry).
func (s *MySQLStore) retryDeadlock(ctx context.Context, op, tag string, fn func(context.Context) error) error {
	return mysqlcluster.Retry(ctx, func(attempt int, err error) {
		s.deadlocks.Add(1)
		s.log.Debug("segment: transaction rolled back by the server (deadlock or certification conflict); retrying it",
			zap.String("op", op), zap.String("tag", tag), zap.Int("attempt", attempt), zap.Error(err))
	}, fn)
}

// Deadlocks is how many transactions the server rolled back whole (deadlock victims,
// certification conflicts) and the store ran again (retryDeadlock).
func (s *MySQLStore) Deadlocks() uint64 { return s.deadlocks.Load() }

func (s *MySQLStore) allocateTx(ctx context.Context, tx *sql.Tx, tag string, step int64) (Alloc, error) {
	var res sql.Result
	var err error
	if step > 0 {
		res, err = tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = max_id + ?, update_time = now() WHERE biz_tag = ?", step, tag)
	} else {
		res, err = tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = max_id + step, update_time = now() WHERE biz_tag = ?", tag)
	}
	if err != nil {
		return Alloc{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Alloc{}, err
	}
	if n == 0 {
		// No row changed: either none matched, or the stored step is 0 (max_id unchanged and
		// update_time within the same second). Never read max_id after a no-op update: it
		// could be a row inserted meanwhile, not one we advanced.
		var stored int64
		err := tx.QueryRowContext(ctx, "SELECT step FROM leaf_alloc WHERE biz_tag = ?", tag).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			return Alloc{}, ErrUnknownTag
		}
		if err != nil {
			return Alloc{}, err
		}
		return Alloc{}, fmt.Errorf("invalid stored step %d", stored)
	}
	var name string
	var a Alloc
	err = tx.QueryRowContext(ctx, "SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?", tag).Scan(&name, &a.MaxID, &a.Step)
	if err != nil {
		return Alloc{}, err
	}
	if step <= 0 && a.Step <= 0 {
		return Alloc{}, fmt.Errorf("invalid stored step %d", a.Step) // rolled back by the caller
	}
	return a, nil
}

// Tags lists the tag names, sorted by the table's collation.
func (s *MySQLStore) Tags(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_ = s.ensureTable(ctx)
	rows, err := s.db.QueryContext(ctx, "SELECT biz_tag FROM leaf_alloc ORDER BY biz_tag")
	if err != nil {
		return nil, s.wrap("tags", "", err)
	}
	defer rows.Close()
	var tags []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, s.wrap("tags", "", err)
		}
		tags = append(tags, t)
	}
	// A connection lost mid-result shows here: never return a truncated list.
	if err := rows.Err(); err != nil {
		return nil, s.wrap("tags", "", err)
	}
	return tags, nil
}

// Rows returns every row, sorted by tag (for status pages, like Leaf's /db page). A NULL
// description reads as "".
func (s *MySQLStore) Rows(ctx context.Context) ([]Tag, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_ = s.ensureTable(ctx)
	// UNIX_TIMESTAMP keeps update_time independent of the session and driver time zones.
	rows, err := s.db.QueryContext(ctx,
		"SELECT biz_tag, max_id, step, description, UNIX_TIMESTAMP(update_time) FROM leaf_alloc ORDER BY biz_tag")
	if err != nil {
		return nil, s.wrap("rows", "", err)
	}
	defer rows.Close()
	var out []Tag
	for rows.Next() {
		var t Tag
		var desc sql.NullString
		var unix float64
		if err := rows.Scan(&t.Name, &t.MaxID, &t.Step, &desc, &unix); err != nil {
			return nil, s.wrap("rows", "", err)
		}
		t.Description = desc.String
		sec, frac := math.Modf(unix)
		t.UpdateTime = time.Unix(int64(sec), int64(frac*1e9))
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("rows", "", err)
	}
	return out, nil
}

// Create inserts a row for t (MaxID 0 means 1, Leaf's default; an empty description is
// stored as NULL). ErrTagExists when biz_tag exists (compared with the column's collation,
// case-insensitive by default), ErrInvalidTag for a bad name, ErrLimit for out-of-range numbers.
func (s *MySQLStore) Create(ctx context.Context, t Tag) error {
	t, err := checkStoreTag(t)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// Committed together with the creations waiting meanwhile (mysqlbatch.go).
	return s.create(ctx, t, 0).err
}

// createUncommitted is Create up to COMMIT: on success the transaction is left open for the
// caller to commit; on error it is rolled back. t is a copy: the START raised here is not
// carried into a retry.
func (s *MySQLStore) createUncommitted(ctx context.Context, t Tag) (*sql.Tx, error) {
	desc := sql.NullString{String: t.Description, Valid: t.Description != ""}
	if err := s.beforeTx(ctx); err != nil {
		return nil, err
	}
	// The shape table before the transaction (DDL commits): the shape check locks its key in
	// it, and a missing table takes no lock, so a CreateShape creating the table meanwhile
	// committed beside this creation (found by TestCreateExclusionRepeatableRead).
	if err := s.ensureShapeTable(ctx); err != nil {
		return nil, err
	}
	// REPEATABLE READ whatever the server's default: shapedLocked's exclusion of a shaped tag
	// of this name rests on a gap lock (see CreateShape).
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: s.createIsolation()})
	if err != nil {
		return nil, err
	}
	if shaped, err := s.shapedLocked(ctx, tx, t.Name); err != nil || shaped {
		_ = tx.Rollback()
		if err != nil {
			return nil, fmt.Errorf("check shape: %w", err)
		}
		return nil, tagError(t.Name, ErrShaped, "its counters are the rows "+t.Name+"@<period>")
	}
	if base, ok := shapedBase(t); ok {
		if shaped, err := s.shapedLocked(ctx, tx, base); err != nil || shaped {
			_ = tx.Rollback()
			if err != nil {
				return nil, fmt.Errorf("check shape: %w", err)
			}
			return nil, errRowNotShaped(t.Name, base)
		}
	}
	if h := s.hooks.afterShapeLock; h != nil {
		if err := h(ctx); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	if s.failoverAllocs > 0 {
		jump, epoch, err := s.createFence(ctx, tx, t.Step)
		if err == nil && t.Row != nil {
			jump, err = s.rowOffset(ctx, tx, epoch, t) // sized by the row's own step (shaperow.go)
		}
		if err != nil {
			_ = tx.Rollback()
			s.dropPending(dbFenceKey)
			return nil, fmt.Errorf("fence: %w", err)
		}
		// The allocation's lock order: the tag's leaf_alloc row (or, missing, its gap) before
		// its fence row. Locking the fence row first deadlocks with an allocation of the same
		// tag that holds the leaf_alloc row and waits for the fence row, whenever a second
		// instance's auto-create finds the tag just created by the first.
		var exists int
		err = tx.QueryRowContext(ctx, "SELECT 1 FROM leaf_alloc WHERE biz_tag = ? FOR UPDATE", t.Name).Scan(&exists)
		if err == nil {
			_ = tx.Rollback()
			s.dropPending(dbFenceKey)
			return nil, fmt.Errorf("%w %q", ErrTagExists, t.Name)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			_ = tx.Rollback()
			s.dropPending(dbFenceKey)
			return nil, err
		}
		// The high-water of an earlier life of the tag (its fence row survives the deletion of
		// the leaf_alloc row; matched with the table's collation, so "KB" finds "kb" where
		// leaf_alloc would): a re-creation, through any instance, starts above every ID issued.
		var hw sql.NullInt64
		err = tx.QueryRowContext(ctx, "SELECT max_end FROM leafd_fence WHERE biz_tag = ? FOR UPDATE", t.Name).Scan(&hw)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			_ = tx.Rollback()
			s.dropPending(dbFenceKey)
			return nil, fmt.Errorf("high-water: %w", err)
		}
		if hw.Int64 > t.MaxID {
			s.log.Info("segment: high-water: the tag existed before and issued IDs up to max_end; it starts there, not at the START asked for",
				zap.String("tag", t.Name), zap.Int64("start", t.MaxID), zap.Int64("max_end", hw.Int64))
			t.MaxID = hw.Int64
		}
		if jump > maxRangeEnd-t.MaxID {
			_ = tx.Rollback()
			s.dropPending(dbFenceKey)
			return nil, fmt.Errorf("%w: start %d + failover gap %d overflows", ErrLimit, t.MaxID, jump)
		}
		t.MaxID += jump
	}
	_, err = tx.ExecContext(ctx,
		"INSERT INTO leaf_alloc (biz_tag, max_id, step, description, update_time) VALUES (?, ?, ?, ?, now())",
		t.Name, t.MaxID, t.Step, desc)
	if err == nil && s.failoverAllocs > 0 {
		err = s.createFenceRow(ctx, tx, t.Name)
	}
	if err == nil && t.Ordered { // the row of package ordered's lease; leafd creates the table at start
		_, err = tx.ExecContext(ctx, ordered.CreateRowSQL(s.leaderIdentity()), t.Name)
	}
	if err != nil {
		_ = tx.Rollback()
		s.dropPending(dbFenceKey)
		return nil, err
	}
	return tx, nil
}

// beforeTx does, before a transaction takes its connection, what the fence would otherwise
// do on a second connection of the pool inside it: record the gap (once) and learn how to
// read the server identity (once). Inside, a full pool of transactions each waiting for
// one more connection would wait for one another until their timeouts.
func (s *MySQLStore) beforeTx(ctx context.Context) error {
	if s.failoverAllocs <= 0 {
		return nil
	}
	s.ensureGap(ctx)
	_, err := s.identExpr(ctx)
	return err
}

// msgGapFailed is the kind (quietlog) of a failed record of the safety gap, tried at every
// allocation until it succeeds.
const msgGapFailed = "segment: cannot record the safety gap in leafd_fence; retrying at the next allocation"

// ensureGap records this instance's safety gap in the database fence row once (failover.go).
// A failure is logged and retried at the next call.
func (s *MySQLStore) ensureGap(ctx context.Context) {
	if s.gapRecorded.Load() {
		return
	}
	if err := s.recordGap(ctx); err != nil {
		s.quiet.Fail(zapcore.WarnLevel, msgGapFailed, err, zap.String("cause", storeerr.Classify(err).String()))
		return
	}
	s.gapRecorded.Store(true)
	s.quiet.OK(msgGapFailed, "segment: safety gap recorded in leafd_fence")
}

// Close closes the connection pool and waits for the creation committer. It is idempotent.
func (s *MySQLStore) Close() error {
	err := s.db.Close()
	s.creates.wg.Wait()
	return err
}

// DB is the store's connection pool (package ordered's leases share it; owned by the store).
func (s *MySQLStore) DB() *sql.DB { return s.db }

// mysqlDriverLog sends the driver's own messages (broken connections it discards) to the
// store's logger instead of the standard logger on stderr.
type mysqlDriverLog struct{ log *zap.Logger }

func (l mysqlDriverLog) Print(v ...any) {
	l.log.Debug("mysql driver: " + strings.TrimSpace(fmt.Sprintln(v...)))
}

// wrap maps server errors to the package sentinels and prefixes the rest. A missing table
// re-arms table creation for the next call (the table may have been dropped, or its creation
// refused earlier for a transient reason such as too many connections).
func (s *MySQLStore) wrap(op, tag string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case mysqlErrNoSuchTable:
			if s.createTable {
				s.tableReady.Store(false)
			}
		case mysqlErrDupEntry:
			err = fmt.Errorf("%w: %w", ErrTagExists, err)
		case mysqlErrDataOutOfRange:
			err = fmt.Errorf("%w: max_id overflows: %w", ErrLimit, err)
		}
	}
	if errors.Is(err, ErrUnknownTag) {
		return fmt.Errorf("%w %q", ErrUnknownTag, tag)
	}
	var b strings.Builder
	b.WriteString("segment: mysql ")
	b.WriteString(op)
	if tag != "" {
		fmt.Fprintf(&b, " %q", tag)
	}
	return fmt.Errorf("%s: %w", b.String(), err)
}

// MaxID reads the tag's max_id without changing it: the first ID of the range the next
// Allocate would lease. The generator asks it after a regression instead of allocating, so
// that its retries do not advance max_id. ErrUnknownTag when there is no row.
func (s *MySQLStore) MaxID(ctx context.Context, tag string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var v int64
	err := s.db.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = ?", tag).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("%w %q", ErrUnknownTag, tag)
	case err != nil:
		return 0, fmt.Errorf("segment: mysql max_id %q: %w", tag, err)
	}
	return v, nil
}
