package mysqlstore

// Adoption: how a leaf_alloc row that leafd did not create (Leaf's table, a row inserted by
// hand) gets its fence row without a jump (docs/MYSQL.md, "Adopting a Leaf table").
//
// With the failover fence on, an allocation refuses a row without a fence row (ErrNotAdopted):
// the database cannot tell "never fenced" from "a failover lost its adoption or first
// allocation", and a jump computed from the row alone would be computed again, to the very
// same range, if a failover lost it. Adoption is the operator's statement that this database
// is the current primary and its max_id is authoritative: it writes the fence row naming this
// server, with the high-water at max_id, and moves nothing, so the next range is
// [max_id, max_id + step), Leaf's own.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/storekit"
)

// AdoptConfig configures Adopt.
type AdoptConfig struct {
	// DryRun reports what would be done and writes nothing (no table is created either).
	DryRun bool
	// Floors are, per tag, the highest range end a leafd instance reported (its durable marks,
	// IDS.MARKS). A tag whose max_id is below its floor is not adopted: the database is behind
	// ranges already granted (a lagging replica promoted after it lost an earlier adoption and
	// the allocations that followed), and adopting it would hand them out again.
	Floors map[string]int64
	// Tags, when not empty, limits the adoption to these tags (the others are listed as
	// they are, "not selected" when they have no fence row).
	Tags []string
}

// Adoption is what Adopt did, or would do, for one tag.
type Adoption struct {
	Tag   string
	MaxID int64 // the row's max_id: the first ID of the tag's next range
	Step  int64
	// State: "adopted" (fence row written), "would adopt" (dry run), "already adopted"
	// (it had a fence row), "refused" (Err says why).
	State string
	Err   error
}

// ErrNotPrimary is Adopt's refusal when the server is a replica or read-only.
var ErrNotPrimary = errors.New("segment: not the primary")

const mysqlErrParse = 1064 // ER_PARSE_ERROR: SHOW REPLICA STATUS on an older server

// CheckPrimary returns ErrNotPrimary (wrapped, with the reason) when the server is read-only
// or replicates from another server (SHOW REPLICA STATUS, or SHOW SLAVE STATUS on older
// servers, has a row: a promotion runs RESET SLAVE ALL / RESET REPLICA ALL). It cannot tell a
// promoted replica that lost transactions; AdoptConfig.Floors does, from the instances' marks.
func (s *MySQLStore) CheckPrimary(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var ro int64
	if err := s.db.QueryRowContext(ctx, "SELECT @@read_only").Scan(&ro); err != nil {
		return fmt.Errorf("segment: mysql read_only: %w", err)
	}
	if ro != 0 {
		return fmt.Errorf("%w: @@read_only is ON (a replica, or a primary being failed over)", ErrNotPrimary)
	}
	// MariaDB's SHOW REPLICA STATUS shows only the default connection: a replica of a named
	// connection (CHANGE MASTER 'm1' TO ...) has no row there. SHOW ALL SLAVES STATUS lists
	// every connection; MySQL has no such statement (a parse error), nor named connections.
	rows, err := s.db.QueryContext(ctx, "SHOW ALL SLAVES STATUS")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == mysqlErrParse {
		rows, err = s.db.QueryContext(ctx, "SHOW REPLICA STATUS")
	}
	if errors.As(err, &me) && me.Number == mysqlErrParse {
		rows, err = s.db.QueryContext(ctx, "SHOW SLAVE STATUS")
	}
	if err != nil {
		return fmt.Errorf("segment: mysql replica status: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return fmt.Errorf("segment: mysql replica status: %w", err)
	}
	if !rows.Next() {
		return rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return fmt.Errorf("segment: mysql replica status: %w", err)
	}
	var from []string
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "master_host", "source_host", "master_port", "source_port":
			from = append(from, vals[i].String)
		}
	}
	return fmt.Errorf("%w: the server replicates from %s (SHOW REPLICA STATUS has a row); adopt on the primary, or finish the promotion (RESET SLAVE ALL) first",
		ErrNotPrimary, strings.Join(from, ":"))
}

// Adopt records a fence row for every tag of leaf_alloc that has none, after CheckPrimary:
// the next range of each is [max_id, max_id + step), as Leaf would lease it. Each tag is one
// transaction that locks its leaf_alloc row and then its fence row, the allocation's lock
// order. A tag adopted meanwhile (another adopt, or one racing it) is "already adopted".
// The result lists every tag of the table; the error is for the run as a whole (not the
// primary, database unreachable).
func (s *MySQLStore) Adopt(ctx context.Context, cfg AdoptConfig) ([]Adoption, error) {
	if s.failoverAllocs <= 0 {
		return nil, errors.New("segment: the failover fence is off (--mysql-failover-allocs 0): rows are served as they are, nothing to adopt")
	}
	if err := s.CheckPrimary(ctx); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	fenceTable := true
	if cfg.DryRun {
		var n int
		if err := s.db.QueryRowContext(lctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafd_fence'").Scan(&n); err != nil {
			return nil, s.wrap("adopt", "", err)
		}
		fenceTable = n > 0
	} else {
		if _, err := s.db.ExecContext(lctx, mysqlCreateFence); err != nil {
			return nil, s.wrap("adopt: create leafd_fence", "", err)
		}
		if err := s.ensureMaxEnd(lctx); err != nil {
			return nil, s.wrap("adopt: upgrade leafd_fence", "", err)
		}
		// The database row, on a database leafd never used (so that the first IDS.CREATE
		// after the adoption does not take it for a lost one); gap 0: instances record theirs.
		if err := s.recordGapOf(lctx, 0, false); err != nil {
			return nil, s.wrap("adopt: database fence row", "", err)
		}
	}
	cancel()
	out, err := s.adoptList(ctx, fenceTable)
	if err != nil {
		return nil, err
	}
	floors := foldFloors(cfg.Floors)
	for i := range out {
		a := &out[i]
		if a.State != "" {
			continue
		}
		if len(cfg.Tags) > 0 && !slices.Contains(cfg.Tags, a.Tag) {
			a.State = "not selected"
			continue
		}
		if cfg.DryRun {
			a.State = "would adopt"
			if err := belowFloor(a.MaxID, floors[foldKey(a.Tag)]); err != nil {
				a.State, a.Err = "refused", err
			}
			continue
		}
		if err := s.adoptTag(ctx, a, floors[foldKey(a.Tag)]); err != nil {
			a.State, a.Err = "refused", err
		}
	}
	return out, nil
}

// adoptListPage is the number of leaf_alloc rows one listing query of Adopt reads.
const adoptListPage = 10000

// adoptList lists every row of leaf_alloc with whether it has a fence row, by tag, a page of
// adoptListPage rows per query (each within the store's timeout, whatever the row count).
func (s *MySQLStore) adoptList(ctx context.Context, fenceTable bool) ([]Adoption, error) {
	q := "SELECT biz_tag, max_id, step, 0 FROM leaf_alloc WHERE biz_tag > ? ORDER BY biz_tag LIMIT ?"
	if fenceTable {
		q = "SELECT a.biz_tag, a.max_id, a.step, f.biz_tag IS NOT NULL FROM leaf_alloc a LEFT JOIN leafd_fence f ON f.biz_tag = a.biz_tag WHERE a.biz_tag > ? ORDER BY a.biz_tag LIMIT ?"
	}
	var out []Adoption
	for after := ""; ; {
		n, err := func() (int, error) {
			lctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			rows, err := s.db.QueryContext(lctx, q, after, adoptListPage)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				var a Adoption
				var fenced bool
				if err := rows.Scan(&a.Tag, &a.MaxID, &a.Step, &fenced); err != nil {
					return 0, err
				}
				if fenced {
					a.State = "already adopted"
				}
				out = append(out, a)
				after = a.Tag
				n++
			}
			return n, rows.Err()
		}()
		if err != nil {
			return nil, s.wrap("adopt: list", "", err)
		}
		if n < adoptListPage {
			return out, nil
		}
	}
}

// foldFloors keys floors by foldKey, keeping the highest floor of each: the instances report
// their marks under the spelling their clients used, and with MySQL's default
// case-insensitive collation a tag `Order` is served from the row `order`. With a binary
// collation the two are distinct tags and this is only more cautious (a refusal names the
// mark, and raise-max-id resolves it). One pass, so that a million marks cost a million steps.
func foldFloors(floors map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(floors))
	for k, v := range floors {
		if f := foldKey(k); v > out[f] {
			out[f] = v
		}
	}
	return out
}

// foldKey maps every rune to the smallest rune of its simple case-folding orbit: two strings
// have the same key exactly when strings.EqualFold holds.
func foldKey(s string) string {
	return strings.Map(func(r rune) rune {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		return m
	}, s)
}

// belowFloor is the refusal of a tag whose max_id is below an instance's mark.
func belowFloor(maxID, floor int64) error {
	if floor > maxID {
		return fmt.Errorf("max_id %d is below %d, the highest range end a leafd instance was granted: this database lost allocations (a lagging replica promoted?); run leafd raise-max-id first", maxID, floor)
	}
	return nil
}

// adoptTag writes the fence row of one tag, in a transaction that locks its leaf_alloc row
// first (the allocation's lock order) and re-checks it under the lock.
func (s *MySQLStore) adoptTag(ctx context.Context, a *Adoption, floor int64) error {
	return s.retryDeadlock(ctx, "adopt", a.Tag, func(ctx context.Context) error {
		expr, err := s.identExpr(ctx)
		if err != nil {
			return err
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }() // after Commit, a no-op
		var fenced sql.NullString
		var self serverIdent
		err = tx.QueryRowContext(ctx, "SELECT a.max_id, a.step, f.biz_tag, "+expr+" FROM leaf_alloc a LEFT JOIN leafd_fence f ON f.biz_tag = a.biz_tag WHERE a.biz_tag = ? FOR UPDATE", a.Tag).
			Scan(&a.MaxID, &a.Step, &fenced, &self.id, &self.uuid)
		if errors.Is(err, sql.ErrNoRows) {
			return segment.ErrUnknownTag // deleted meanwhile
		}
		if err != nil {
			return err
		}
		if fenced.Valid {
			a.State = "already adopted"
			return nil
		}
		if err := belowFloor(a.MaxID, floor); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO leafd_fence (biz_tag, server_id, server_uuid, epoch, token, gap, max_end) VALUES (?, ?, ?, 1, ?, 0, ?)",
			a.Tag, self.id, self.uuid, randToken(), a.MaxID); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		a.State = "adopted"
		s.log.Info("segment: tag adopted: fence row written; its next range starts at max_id",
			zap.String("tag", a.Tag), zap.Int64("max_id", a.MaxID), zap.Int64("step", a.Step), zap.String("server", self.String()))
		return nil
	})
}

// CheckTag reports, without locking or allocating, whether an allocation of tag would find
// its row (ErrUnknownTag) and, with the fence on, its fence row (ErrNotAdopted).
func (s *MySQLStore) CheckTag(ctx context.Context, tag string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.failoverAllocs <= 0 {
		_, err := s.MaxID(ctx, tag)
		return err
	}
	var maxID int64
	var fenced sql.NullString
	err := s.db.QueryRowContext(ctx, "SELECT a.max_id, f.biz_tag FROM leaf_alloc a LEFT JOIN leafd_fence f ON f.biz_tag = a.biz_tag WHERE a.biz_tag = ?", tag).
		Scan(&maxID, &fenced)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return storekit.TagError(tag, segment.ErrUnknownTag, "no such tag in the store")
	case err != nil:
		return s.wrap("check", tag, err)
	case !fenced.Valid:
		return storekit.TagError(tag, segment.ErrNotAdopted, fmt.Sprintf("leaf_alloc row (max_id %d) has no leafd_fence row", maxID))
	}
	return nil
}
