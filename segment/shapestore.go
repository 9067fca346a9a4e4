package segment

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/go-sql-driver/mysql"
	bolt "go.etcd.io/bbolt"
)

// Shapes stores the ID shape of shaped tags (package shape: template, reset, zone, opaque),
// one opaque blob per tag, beside leaf_alloc so every instance renders a tag alike. A shaped
// tag has no leaf_alloc row of its own name: its counters are the rows tag@period, and a
// plain row of the shaped name is never created (Create refuses it with ErrShaped), so an
// instance that does not know the shape yet cannot serve raw counters under that name.
// Implementations: *MySQLStore (table leafd_tag_shape), *BoltStore (bucket tag_shape).
type Shapes interface {
	// CreateShape records spec for tag; ErrTagExists when tag has a shape or a leaf_alloc row.
	CreateShape(ctx context.Context, tag string, spec []byte) error
	// LoadShape returns tag's spec; ErrUnknownTag when it has none.
	LoadShape(ctx context.Context, tag string) ([]byte, error)
	// ShapeTags lists the shaped tags, sorted.
	ShapeTags(ctx context.Context) ([]string, error)
}

var (
	_ Shapes = (*MySQLStore)(nil)
	_ Shapes = (*BoltStore)(nil)
)

// ErrShaped: Create was given the name of a shaped tag (its counters live in rows tag@period).
var ErrShaped = errors.New("segment: the tag has an ID shape")

// MaxShapeLen bounds a stored spec, in bytes.
const MaxShapeLen = 1024

var boltShapeBucket = []byte("tag_shape")

const mysqlCreateShape = "CREATE TABLE IF NOT EXISTS `leafd_tag_shape` (\n" +
	"  `biz_tag` varchar(128) NOT NULL DEFAULT '',\n" +
	"  `spec` varchar(1024) NOT NULL,\n" +
	"  `create_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

func checkShape(tag string, spec []byte) error {
	if err := ValidateTag(tag); err != nil {
		return err
	}
	if len(spec) == 0 || len(spec) > MaxShapeLen {
		return tagError(tag, ErrLimit, fmt.Sprintf("shape of %d bytes, 1 to %d allowed", len(spec), MaxShapeLen))
	}
	return nil
}

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
	if err := checkShape(tag, spec); err != nil {
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
		var te *TagError
		if errors.As(err, &te) {
			return err
		}
		if werr := s.wrap(op, tag, err); errors.Is(werr, ErrTagExists) {
			return tagError(tag, ErrTagExists, "tag already exists")
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
		return nil, tagError(tag, ErrTagExists, "a plain tag of this name exists")
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("check leaf_alloc: %w", err)
	}
	// Rows tag@... that this shape did not create: a locking range read, so a concurrent plain
	// creation of one waits for this transaction and then finds the shape (shapedLocked).
	var row string
	err = tx.QueryRowContext(ctx, "SELECT biz_tag FROM leaf_alloc WHERE biz_tag LIKE ? ESCAPE '!' LIMIT 1 FOR UPDATE", likePrefix(tag+"@")).Scan(&row)
	if err == nil {
		return nil, errRowsExist(tag)
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
		return nil, fmt.Errorf("%w %q", ErrUnknownTag, tag)
	case err != nil:
		return nil, s.wrap("load shape", tag, err)
	}
	if name != tag {
		// A case-insensitive collation matched another spelling. Its counter rows are shared
		// (tag@period matches as well), but the opaque permutation is keyed by the name as
		// written: two spellings would map one counter through two permutations and collide
		// (TestShapedTagOneSpelling). One spelling only.
		return nil, tagError(tag, ErrInvalidTag, fmt.Sprintf("the shaped tag is stored as '%s': ID shapes are case-sensitive, use that spelling", name))
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

// CreateShape records tag's shape in the tag_shape bucket, in the transaction that checks
// leaf_alloc (bbolt has one writer: no race with Create).
func (s *BoltStore) CreateShape(ctx context.Context, tag string, spec []byte) error {
	if err := checkShape(tag, spec); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		if tx.Bucket(boltAllocBucket).Get([]byte(tag)) != nil {
			return tagError(tag, ErrTagExists, "a plain tag of this name exists")
		}
		if boltShaped(tx, tag) {
			return tagError(tag, ErrTagExists, "tag already exists")
		}
		if boltHasRows(tx, tag) {
			return errRowsExist(tag)
		}
		// Refusals before the first write: the transaction is shared (group commit).
		b, err := tx.CreateBucketIfNotExists(boltShapeBucket)
		if err != nil {
			return err
		}
		return b.Put([]byte(tag), spec)
	})
	return boltWrapNil("create shape", err)
}

func boltShaped(tx *bolt.Tx, name string) bool {
	b := tx.Bucket(boltShapeBucket)
	return b != nil && b.Get([]byte(name)) != nil
}

// boltShapedName is Create's check of a name against the shapes (see shapedBase).
func boltShapedName(tx *bolt.Tx, t Tag) error {
	if boltShaped(tx, t.Name) {
		return tagError(t.Name, ErrShaped, "its counters are the rows "+t.Name+"@<period>")
	}
	if base, ok := shapedBase(t); ok && boltShaped(tx, base) {
		return errRowNotShaped(t.Name, base)
	}
	return nil
}

// boltHasRows reports whether leaf_alloc has a row tag@....
func boltHasRows(tx *bolt.Tx, tag string) bool {
	prefix := []byte(tag + "@")
	k, _ := tx.Bucket(boltAllocBucket).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// shapedBase returns the prefix before the first '@' of a name that a plain creation (not a
// shaped tag's own row) must not take when that prefix is a shaped tag: a plain row tag@x
// would be served as the shaped tag's counter of period x, from a START it did not choose.
func shapedBase(t Tag) (string, bool) {
	i := strings.IndexByte(t.Name, '@')
	if i <= 0 || t.Row != nil {
		return "", false
	}
	return t.Name[:i], true
}

func errRowNotShaped(name, base string) error {
	return tagError(name, ErrShaped, "'"+base+"' is a shaped tag and its counter rows are created only through it (IDS.NEXT "+base+")")
}

// errRowsExist: CreateShape of a name that has rows tag@... it did not create.
func errRowsExist(tag string) error {
	return tagError(tag, ErrTagExists, "rows '"+tag+"@...' exist: a shaped tag would take them over as its counters; choose another name")
}

// LoadShape reads tag's shape.
func (s *BoltStore) LoadShape(ctx context.Context, tag string) ([]byte, error) {
	var spec []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltShapeBucket)
		var v []byte
		if b != nil {
			v = b.Get([]byte(tag))
		}
		if v == nil {
			return fmt.Errorf("%w %q", ErrUnknownTag, tag)
		}
		spec = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return nil, boltWrap("load shape", err)
	}
	return spec, nil
}

// ShapeTags lists the shaped tags.
func (s *BoltStore) ShapeTags(ctx context.Context) ([]string, error) {
	var out []string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltShapeBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error { out = append(out, string(k)); return nil })
	})
	sort.Strings(out)
	return out, boltWrapNil("shape tags", err)
}

// PeriodRows lists the counter rows of shaped tag (tag@period), sorted (periods sort by time).
func PeriodRows(ctx context.Context, st Store, tag string) ([]string, error) {
	all, err := st.Tags(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range all {
		if strings.HasPrefix(t, tag+"@") {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, nil
}

func boltWrapNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return boltWrap(op, err)
}

// Pruner deletes leaf_alloc rows (the old periods of periodic tags). A deleted row's IDs are
// never issued again: a re-created row starts above this instance's mark and, on MySQL with
// the failover fence, above leafd_fence's high-water (which the deletion keeps).
type Pruner interface {
	DeleteTag(ctx context.Context, tag string) error
}

var (
	_ Pruner = (*MySQLStore)(nil)
	_ Pruner = (*BoltStore)(nil)
)

// DeleteTag deletes tag's leaf_alloc row (its leafd_fence row stays: the high-water).
func (s *MySQLStore) DeleteTag(ctx context.Context, tag string) error {
	if s.failoverAllocs <= 0 {
		// Without the fence there is no high-water: another instance (one without this one's
		// marks) would re-create the row at 1 and issue the period's IDs again
		// (TestPruneNeedsTheFence).
		return tagError(tag, ErrLimit, "pruning needs the failover fence's high-water (--mysql-failover-allocs > 0): without it a pruned period could start again at 1 on another instance")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, "DELETE FROM leaf_alloc WHERE biz_tag = ?", tag); err != nil {
		return s.wrap("delete", tag, err)
	}
	return nil
}

// DeleteTag deletes tag's row.
func (s *BoltStore) DeleteTag(ctx context.Context, tag string) error {
	return boltWrapNil("delete", s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(boltAllocBucket).Delete([]byte(tag))
	}))
}
