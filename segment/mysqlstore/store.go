package mysqlstore

// The MySQL store: its connection, the allocation transaction and the errors it maps. The
// other statements are beside it: rows.go (list, read, create), schema.go (DDL), fence.go
// (the failover fence), create.go (creation batches), semisync.go, adopt.go, shapes.go,
// shaperow.go, region.go, remainder.go, raise.go.

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
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/internal/quietlog"
	"github.com/leafd/leafd/internal/storeerr"
	"github.com/leafd/leafd/segment"
)

var (
	_ segment.Store  = (*MySQLStore)(nil)
	_ segment.Lessor = (*MySQLStore)(nil)
)

// MySQL server error numbers the store maps to sentinels.
const (
	mysqlErrDupEntry       = 1062 // ER_DUP_ENTRY
	mysqlErrDataOutOfRange = 1690 // ER_DATA_OUT_OF_RANGE: max_id + step overflows BIGINT
	mysqlErrNoSuchTable    = 1146 // ER_NO_SUCH_TABLE
)

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
	shapeReady  atomic.Bool   // CREATE TABLE leafd_tag_shape done or refused (shapes.go)
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
	creates createGroup // creations committed together (create.go)
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

// Allocate adds step (the stored step when step <= 0) to the tag's max_id and reads the row
// back in the same transaction, then commits; all within QueryTimeout. With the failover
// fence on, the same transaction first checks the fence (see fence.go).
func (s *MySQLStore) Allocate(ctx context.Context, tag string, step int64) (segment.Alloc, error) {
	return s.AllocateAbove(ctx, tag, step, 0)
}

// AllocateAbove is Allocate that refuses a range starting below floor (the caller's
// regression mark; 0: none) inside the transaction: it rolls back, so that a refused lease
// never moves max_id, and returns an error matching ErrRegression.
func (s *MySQLStore) AllocateAbove(ctx context.Context, tag string, step, floor int64) (segment.Alloc, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_ = s.ensureTable(ctx) // a failure here shows again, as the real error, below
	var (
		tx     *sql.Tx
		a      segment.Alloc
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
			return segment.Alloc{}, err
		}
		return segment.Alloc{}, s.wrap(op, tag, err)
	}
	s.commitEpoch(tag)
	if s.requireSemiSync {
		after, err := readSemiSync(ctx, s.db)
		switch {
		case err != nil:
			return segment.Alloc{}, s.wrap("allocate: semi-sync status after commit", tag, err)
		case !after.on || after.noTx != before.noTx:
			// Committed but perhaps not on any replica: the range is dropped (a gap).
			return segment.Alloc{}, errSemiSyncOff(tag, "a commit was not acknowledged by a replica while this allocation ran")
		}
	}
	return a, nil
}

// allocateUncommitted is AllocateAbove up to COMMIT: on success the transaction is left open
// for the caller to commit; on error it is rolled back (the error is not yet wrapped, except
// by the fence's and semi-sync's own words).
func (s *MySQLStore) allocateUncommitted(ctx context.Context, tag string, step, floor int64) (*sql.Tx, segment.Alloc, semiSync, error) {
	if err := s.beforeTx(ctx); err != nil {
		return nil, segment.Alloc{}, semiSync{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, segment.Alloc{}, semiSync{}, err
	}
	var before semiSync
	if s.requireSemiSync {
		if before, err = readSemiSync(ctx, tx); err != nil {
			_ = tx.Rollback()
			return nil, segment.Alloc{}, semiSync{}, fmt.Errorf("semi-sync status: %w", err)
		}
		if !before.known || !before.on {
			_ = tx.Rollback()
			what := "the primary has fallen back to asynchronous replication (Rpl_semi_sync_master_status OFF)"
			if !before.known {
				what = "semi-sync is not available on the server"
			}
			return nil, segment.Alloc{}, semiSync{}, errSemiSyncOff(tag, what)
		}
	}
	var a segment.Alloc
	if s.failoverAllocs > 0 {
		row, ferr := s.fence(ctx, tx, tag, step, floor)
		if ferr != nil {
			_ = tx.Rollback()
			s.dropPending(tag)
			return nil, segment.Alloc{}, semiSync{}, fmt.Errorf("fence: %w", ferr)
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
		return nil, segment.Alloc{}, semiSync{}, err
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

func (s *MySQLStore) allocateTx(ctx context.Context, tx *sql.Tx, tag string, step int64) (segment.Alloc, error) {
	var res sql.Result
	var err error
	if step > 0 {
		res, err = tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = max_id + ?, update_time = now() WHERE biz_tag = ?", step, tag)
	} else {
		res, err = tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = max_id + step, update_time = now() WHERE biz_tag = ?", tag)
	}
	if err != nil {
		return segment.Alloc{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return segment.Alloc{}, err
	}
	if n == 0 {
		// No row changed: either none matched, or the stored step is 0 (max_id unchanged and
		// update_time within the same second). Never read max_id after a no-op update: it
		// could be a row inserted meanwhile, not one we advanced.
		var stored int64
		err := tx.QueryRowContext(ctx, "SELECT step FROM leaf_alloc WHERE biz_tag = ?", tag).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			return segment.Alloc{}, segment.ErrUnknownTag
		}
		if err != nil {
			return segment.Alloc{}, err
		}
		return segment.Alloc{}, fmt.Errorf("invalid stored step %d", stored)
	}
	var name string
	var a segment.Alloc
	err = tx.QueryRowContext(ctx, "SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?", tag).Scan(&name, &a.MaxID, &a.Step)
	if err != nil {
		return segment.Alloc{}, err
	}
	if step <= 0 && a.Step <= 0 {
		return segment.Alloc{}, fmt.Errorf("invalid stored step %d", a.Step) // rolled back by the caller
	}
	return a, nil
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

// ensureGap records this instance's safety gap in the database fence row once (fence.go).
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
			err = fmt.Errorf("%w: %w", segment.ErrTagExists, err)
		case mysqlErrDataOutOfRange:
			err = fmt.Errorf("%w: max_id overflows: %w", segment.ErrLimit, err)
		}
	}
	if errors.Is(err, segment.ErrUnknownTag) {
		return fmt.Errorf("%w %q", segment.ErrUnknownTag, tag)
	}
	var b strings.Builder
	b.WriteString("segment: mysql ")
	b.WriteString(op)
	if tag != "" {
		fmt.Fprintf(&b, " %q", tag)
	}
	return fmt.Errorf("%s: %w", b.String(), err)
}
