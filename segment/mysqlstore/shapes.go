package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/storekit"
)

var (
	_ segment.Shapes = (*MySQLStore)(nil)
	_ segment.Pruner = (*MySQLStore)(nil)
)

const mysqlCreateShape = "CREATE TABLE IF NOT EXISTS `leafd_tag_shape` (\n" +
	"  `biz_tag` varchar(128) NOT NULL DEFAULT '',\n" +
	"  `spec` varchar(1024) NOT NULL,\n" +
	"  `create_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

func (s *MySQLStore) ensureShapeTable(ctx context.Context) error {
	if s.shapeReady.Load() {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, mysqlCreateShape); err != nil {
		var me *mysql.MySQLError
		if !errors.As(err, &me) {
			return s.wrap("create table leafd_tag_shape", "", err)
		}
		// No CREATE privilege: use the table as it is (or fail on it below).
	}
	s.shapeReady.Store(true)
	return nil
}

// CreateShape inserts tag's shape. The transaction locks the tag's key in leaf_alloc and in
// leafd_tag_shape (SELECT ... FOR UPDATE: a record or gap lock), as Create does in the
// other order, so a plain Create and a CreateShape of one name never both commit.
func (s *MySQLStore) CreateShape(ctx context.Context, tag string, spec []byte) error {
	if err := storekit.CheckShape(tag, spec); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_ = s.ensureTable(ctx)
	if err := s.ensureShapeTable(ctx); err != nil {
		return err
	}
	// The whole transaction, COMMIT included; one rolled back whole by the server (a deadlock
	// victim, e.g. against a concurrent Create of the name locking the keys in the other
	// order, or a certification conflict at COMMIT) runs again, as Create's transaction does
	// (retryDeadlock), instead of answering ERR internal error.
	op := "create shape"
	err := s.retryDeadlock(ctx, op, tag, func(ctx context.Context) error {
		op = "create shape"
		tx, err := s.createShapeUncommitted(ctx, tag, spec)
		if err != nil {
			return err
		}
		if err = tx.Commit(); err != nil {
			op = "create shape: commit"
		}
		return err
	})
	if err != nil {
		var te *segment.TagError
		if errors.As(err, &te) {
			return err
		}
		if werr := s.wrap(op, tag, err); errors.Is(werr, segment.ErrTagExists) {
			return storekit.TagError(tag, segment.ErrTagExists, "tag already exists")
		} else {
			return werr
		}
	}
	return nil
}

// createShapeUncommitted is CreateShape up to COMMIT: on success the transaction is left open
// for the caller to commit; on error it is rolled back.
func (s *MySQLStore) createShapeUncommitted(ctx context.Context, tag string, spec []byte) (_ *sql.Tx, err error) {
	// REPEATABLE READ whatever the server's default: the exclusion of a plain and a shaped
	// tag of one name rests on gap locks (SELECT ... FOR UPDATE of a missing key), which READ
	// COMMITTED does not take (TestCreateExclusionRepeatableRead).
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: s.createIsolation()})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var one int
	err = tx.QueryRowContext(ctx, "SELECT 1 FROM leaf_alloc WHERE biz_tag = ? FOR UPDATE", tag).Scan(&one)
	if err == nil {
		return nil, storekit.TagError(tag, segment.ErrTagExists, "a plain tag of this name exists")
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("check leaf_alloc: %w", err)
	}
	// Rows tag@... that this shape did not create: a locking range read, so a concurrent plain
	// creation of one waits for this transaction and then finds the shape (shapedLocked).
	var row string
	err = tx.QueryRowContext(ctx, "SELECT biz_tag FROM leaf_alloc WHERE biz_tag LIKE ? ESCAPE '!' LIMIT 1 FOR UPDATE", likePrefix(tag+"@")).Scan(&row)
	if err == nil {
		return nil, storekit.ErrRowsExist(tag)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("check leaf_alloc rows: %w", err)
	}
	if h := s.hooks.afterShapeCheck; h != nil {
		if err := h(ctx); err != nil {
			return nil, err
		}
	}
	if _, err = tx.ExecContext(ctx, "INSERT INTO leafd_tag_shape (biz_tag, spec) VALUES (?, ?)", tag, spec); err != nil {
		return nil, err
	}
	return tx, nil
}

// likePrefix is a LIKE pattern (escape '!') matching the names that start with p.
func likePrefix(p string) string {
	r := strings.NewReplacer("!", "!!", "%", "!%", "_", "!_")
	return r.Replace(p) + "%"
}

// shapedLocked reports, inside Create's transaction, whether name is a shaped tag, locking
// its key in leafd_tag_shape (see CreateShape). A missing table means no shapes.
func (s *MySQLStore) shapedLocked(ctx context.Context, tx *sql.Tx, name string) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, "SELECT 1 FROM leafd_tag_shape WHERE biz_tag = ? FOR UPDATE", name).Scan(&one)
	var me *mysql.MySQLError
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &me) && me.Number == mysqlErrNoSuchTable:
		return false, nil
	}
	return false, err
}

// LoadShape reads tag's shape.
func (s *MySQLStore) LoadShape(ctx context.Context, tag string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var spec []byte
	var name string
	err := s.db.QueryRowContext(ctx, "SELECT biz_tag, spec FROM leafd_tag_shape WHERE biz_tag = ?", tag).Scan(&name, &spec)
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &me) && me.Number == mysqlErrNoSuchTable:
		return nil, fmt.Errorf("%w %q", segment.ErrUnknownTag, tag)
	case err != nil:
		return nil, s.wrap("load shape", tag, err)
	}
	if name != tag {
		// A case-insensitive collation matched another spelling. Its counter rows are shared
		// (tag@period matches as well), but the opaque permutation is keyed by the name as
		// written: two spellings would map one counter through two permutations and collide
		// (TestShapedTagOneSpelling). One spelling only.
		return nil, storekit.TagError(tag, segment.ErrInvalidTag, fmt.Sprintf("the shaped tag is stored as '%s': ID shapes are case-sensitive, use that spelling", name))
	}
	return spec, nil
}

// ShapeTags lists the shaped tags.
func (s *MySQLStore) ShapeTags(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, "SELECT biz_tag FROM leafd_tag_shape ORDER BY biz_tag")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == mysqlErrNoSuchTable {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("shape tags", "", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, s.wrap("shape tags", "", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// DeleteTag deletes tag's leaf_alloc row (its leafd_fence row stays: the high-water).
func (s *MySQLStore) DeleteTag(ctx context.Context, tag string) error {
	if s.failoverAllocs <= 0 {
		// Without the fence there is no high-water: another instance (one without this one's
		// marks) would re-create the row at 1 and issue the period's IDs again
		// (TestPruneNeedsTheFence).
		return storekit.TagError(tag, segment.ErrLimit, "pruning needs the failover fence's high-water (--mysql-failover-allocs > 0): without it a pruned period could start again at 1 on another instance")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, "DELETE FROM leaf_alloc WHERE biz_tag = ?", tag); err != nil {
		return s.wrap("delete", tag, err)
	}
	return nil
}
