package mysqlstore

// The MySQL store's rows: listing, reading and creating leaf_alloc rows.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/storekit"
)

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
func (s *MySQLStore) Rows(ctx context.Context) ([]segment.Tag, error) {
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
	var out []segment.Tag
	for rows.Next() {
		var t segment.Tag
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
func (s *MySQLStore) Create(ctx context.Context, t segment.Tag) error {
	t, err := storekit.CheckTag(t)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// Committed together with the creations waiting meanwhile (create.go).
	return s.create(ctx, t, 0).err
}

// createUncommitted is Create up to COMMIT: on success the transaction is left open for the
// caller to commit; on error it is rolled back. t is a copy: the START raised here is not
// carried into a retry.
func (s *MySQLStore) createUncommitted(ctx context.Context, t segment.Tag) (*sql.Tx, error) {
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
		return nil, storekit.TagError(t.Name, segment.ErrShaped, "its counters are the rows "+t.Name+"@<period>")
	}
	if base, ok := storekit.ShapedBase(t); ok {
		if shaped, err := s.shapedLocked(ctx, tx, base); err != nil || shaped {
			_ = tx.Rollback()
			if err != nil {
				return nil, fmt.Errorf("check shape: %w", err)
			}
			return nil, storekit.ErrRowNotShaped(t.Name, base)
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
			return nil, fmt.Errorf("%w %q", segment.ErrTagExists, t.Name)
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
		if jump > segment.MaxRangeEnd-t.MaxID {
			_ = tx.Rollback()
			s.dropPending(dbFenceKey)
			return nil, fmt.Errorf("%w: start %d + failover gap %d overflows", segment.ErrLimit, t.MaxID, jump)
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
		return 0, fmt.Errorf("%w %q", segment.ErrUnknownTag, tag)
	case err != nil:
		return 0, fmt.Errorf("segment: mysql max_id %q: %w", tag, err)
	}
	return v, nil
}
