package mysqlstore

// The statements of `leafd raise-max-id` on MySQL (and of `leafd region`'s counter moves):
// max_id read in batches, and raised under the row lock. They run on a plain *sql.DB, not
// through a MySQLStore: the tools raise rows without opening a store.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ReadMaxIDs reads max_id of the tags (sorted) in batches of 5000, without locks. A tag is
// in the result only when a row of exactly its name came back; the others (no row, or a row
// of another letter case under a case-insensitive collation) are left to RaiseMaxID, which asks
// the server for that one tag.
func ReadMaxIDs(ctx context.Context, db *sql.DB, tags []string, timeout time.Duration) (map[string]int64, error) {
	out := make(map[string]int64, len(tags))
	for len(tags) > 0 {
		batch := tags[:min(len(tags), 5000)]
		tags = tags[len(batch):]
		args := make([]any, len(batch))
		for i, t := range batch {
			args[i] = t
		}
		q := "SELECT biz_tag, max_id FROM leaf_alloc WHERE biz_tag IN (?" + strings.Repeat(", ?", len(batch)-1) + ")"
		err := func() error {
			qctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			rows, err := db.QueryContext(qctx, q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var tag string
				var maxID int64
				if err := rows.Scan(&tag, &maxID); err != nil {
					return err
				}
				if _, asked := slices.BinarySearch(batch, tag); asked {
					out[tag] = maxID
				}
			}
			return rows.Err()
		}()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RaiseMaxID sets the tag's max_id to target when it is below, in one transaction with the
// row locked, and returns max_id before and after.
func RaiseMaxID(ctx context.Context, db *sql.DB, tag string, target int64, dryRun bool, timeout time.Duration) (before, after int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	err = tx.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = ? FOR UPDATE", tag).Scan(&before)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, fmt.Errorf("no row in leaf_alloc (create it with max_id at least %d)", target)
	}
	if err != nil {
		return 0, 0, err
	}
	if before >= target || dryRun {
		return before, max(before, target), nil
	}
	if _, err := tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ? AND max_id < ?", target, tag, target); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	return before, target, nil
}
