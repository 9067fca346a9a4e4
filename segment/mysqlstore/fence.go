package mysqlstore

// The failover fence of MySQLStore: how a database that failed over to a replica that had
// not received the last allocations is made safe without an operator (docs/MYSQL.md,
// "Failover").
//
// Each tag has a row in leafd's own table leafd_fence (Leaf's leaf_alloc is unchanged). The
// row names the primary that granted the tag's last ranges (@@server_id, and @@server_uuid on
// MySQL; on a Galera cluster the cluster's state UUID, which every member shares) and an epoch that grows by one at each takeover. Every allocation transaction locks
// the leaf_alloc row and then reads the fence row. When the row was written by another
// server, is missing, or carries an epoch below one this process has already seen, the
// database is not the one that granted the last ranges — a failover (or a restored backup)
// that may have lost the last allocations. The transaction then moves max_id forward by the
// safety gap (FailoverAllocs × the largest step any allocation may have used) and writes the
// fence row with this server and the next epoch, in the same transaction as the allocation
// that follows. So the first instance to allocate a tag on the new primary covers every
// instance, including those without marks, and the jump happens exactly once per tag and
// failover: the fence row now names the new primary.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/segment"
)

// serverIdent identifies the database server a transaction runs on.
type serverIdent struct {
	id   mysqlcluster.ID   // NULL scans as mysqlcluster.ErrNoIdentity (retried)
	uuid mysqlcluster.Name // likewise
}

func (s serverIdent) String() string {
	if s.uuid == "" {
		return fmt.Sprintf("server_id %d", s.id)
	}
	return fmt.Sprintf("server_id %d (%s)", s.id, s.uuid)
}

// fenceRow is the tag's leaf_alloc row locked for the allocation, with its fence row.
type fenceRow struct {
	step, maxID int64
	self        serverIdent // the server this transaction runs on
	found       bool        // a fence row exists
	owner       serverIdent
	epoch       int64
	maxEnd      int64 // the fence row's high-water (0: none yet)
}

// identExpr is the SQL of the database's identity, two columns (mysqlcluster.Detect): the
// server's (@@server_id, and @@server_uuid on MySQL) on a single server, the cluster's on
// a Galera member, so that moving between the members of one cluster is no failover.
func (s *MySQLStore) identExpr(ctx context.Context) (string, error) {
	if p := s.ident.Load(); p != nil {
		return *p, nil
	}
	id, err := mysqlcluster.Detect(ctx, s.db)
	if err != nil {
		return "", err
	}
	if id.Kind == mysqlcluster.Galera {
		s.log.Info("segment: the database is a Galera cluster: its identity is the cluster's (wsrep_cluster_state_uuid), the same on every member")
	}
	s.identFull.Store(&id)
	s.identID.Store(&id.ID)
	s.ident.Store(&id.Pair)
	return id.Pair, nil
}

// checkCluster compares the member's state, read beside the identity (the last column of the
// statement, clusterState), with what the process saw (mysqlcluster.History.Check): a Galera
// cluster restarted from a member that lacked commits is a new identity, and the transaction
// runs again under it (mysqlcluster.ErrGeneration).
func (s *MySQLStore) checkCluster(ctx context.Context, st mysqlcluster.State) error {
	return s.cluster.Check(ctx, s.identFull.Load().On(s.db), st)
}

// clusterState is the SQL of the member's state column (after identExpr).
func (s *MySQLStore) clusterState() string { return s.identFull.Load().State }

// Cluster is the Galera history the store checks (MySQLConfig.Cluster), for the other
// stores of the database (the ORDERED leases).
func (s *MySQLStore) Cluster() *mysqlcluster.History { return s.cluster }

// OnDatabaseChange implements segment.DatabaseNotifier: f runs when the process learns of a
// new generation of the Galera cluster (mysqlcluster.History.OnGeneration).
func (s *MySQLStore) OnDatabaseChange(f func()) { s.cluster.OnGeneration(f) }

// leaderIdentity is the identity column an ORDERED tag's creating insert records in its
// leafd_leader row (ordered.CreateRowSQL): the database's, once known, else the server's
// (on a Galera cluster the lease then counts the row as moved and settles once).
func (s *MySQLStore) leaderIdentity() string {
	if p := s.identID.Load(); p != nil {
		return *p
	}
	return "@@server_id"
}

// fence runs at the start of an allocation transaction: it locks the tag's rows and, when the
// fence shows that the database changed since the last range was granted, moves max_id
// forward by the safety gap and takes the fence over. step is the step of the allocation that
// follows (<= 0: the stored one).
//
// floor is the caller's regression mark (0: none). A takeover moves max_id to at least floor
// and commits even when stale + gap lands below it: an instance that holds marks above a lost
// takeover (a second failover that lost the first one's jump) thereby moves the table up for
// every instance, instead of refusing while the others lease inside its ranges. Refusals
// without a takeover still never move max_id (AllocateAbove).
func (s *MySQLStore) fence(ctx context.Context, tx *sql.Tx, tag string, step, floor int64) (fenceRow, error) {
	expr, err := s.identExpr(ctx)
	if err != nil {
		return fenceRow{}, err
	}
	// Lock order: leaf_alloc, then leafd_fence, in every transaction, so fenced allocations of
	// one tag are serialized by the leaf_alloc row lock and cannot deadlock on a missing fence
	// row.
	var r fenceRow
	var ownerID sql.NullInt64
	var ownerUUID sql.NullString
	var epoch, maxEnd sql.NullInt64
	var st mysqlcluster.State
	err = tx.QueryRowContext(ctx, "SELECT a.step, a.max_id, "+expr+", f.server_id, f.server_uuid, f.epoch, f.max_end, "+s.clusterState()+
		" FROM leaf_alloc a LEFT JOIN leafd_fence f ON f.biz_tag = a.biz_tag WHERE a.biz_tag = ? FOR UPDATE", tag).
		Scan(&r.step, &r.maxID, &r.self.id, &r.self.uuid, &ownerID, &ownerUUID, &epoch, &maxEnd, &st)
	if errors.Is(err, sql.ErrNoRows) {
		return fenceRow{}, segment.ErrUnknownTag
	}
	if err == nil {
		err = s.checkCluster(ctx, st)
	}
	if err != nil {
		return fenceRow{}, err
	}
	r.found = ownerID.Valid
	r.owner = serverIdent{mysqlcluster.ID(ownerID.Int64), mysqlcluster.Name(ownerUUID.String)}
	r.epoch = epoch.Int64
	r.maxEnd = maxEnd.Int64
	shaped, err := s.shapedRowStep(ctx, tx, tag, r.step, step) // shaperow.go
	if err != nil {
		return fenceRow{}, err
	}

	if !r.found {
		// A row leafd never fenced (Leaf's, inserted by hand) or whose adoption or first
		// fenced allocation a failover lost: nothing in the database tells the two apart, and
		// a jump computed from the row alone would be computed again, to the same range, by
		// the next primary if this transaction were lost too. Refused until adopted (a
		// statement the operator makes about which database is the primary), never moved.
		s.noteNotAdopted(tag, r)
		return fenceRow{}, &segment.TagError{Tag: tag, Err: segment.ErrNotAdopted, Detail: fmt.Sprintf(
			"leaf_alloc row (max_id %d) has no leafd_fence row: written by Leaf or by hand, or its adoption was lost in a failover", r.maxID)}
	}
	seen := s.seenEpoch(tag)
	reason := ""
	switch {
	case r.owner != r.self:
		reason = "the last range was granted by " + r.owner.String()
	case r.epoch < seen:
		reason = fmt.Sprintf("fence epoch %d is below epoch %d seen before (the database lost transactions: a failback or a restored backup)", r.epoch, seen)
	default:
		s.noteEpoch(tag, r.epoch)
		if r.maxID < r.maxEnd {
			// The same primary, but max_id is below ranges already granted: the row was
			// deleted and created again (by hand, or by a leafd without the fence), or
			// lowered by hand. The high-water is exact (written with every allocation), so
			// max_id moves up to it, in this transaction, for every instance.
			if _, err := tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ?", r.maxEnd, tag); err != nil {
				return fenceRow{}, err
			}
			s.log.Warn("segment: high-water: max_id is below the highest range end ever granted for the tag (row re-created or lowered); moving it up",
				zap.String("tag", tag), zap.Int64("max_id", r.maxID), zap.Int64("max_end", r.maxEnd))
			r.maxID = r.maxEnd
		}
		return r, nil
	}

	gap := s.failoverAllocs * r.step // a shaped tag's row: leased at its stored step only
	if !shaped {
		if gap, err = s.takeoverGap(ctx, tx, r.step, step); err != nil {
			return fenceRow{}, err
		}
	}
	next := max(r.epoch, seen) + 1
	newMax := max(max(r.maxID, r.maxEnd)+gap, floor)
	if _, err := tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ?", newMax, tag); err != nil {
		return fenceRow{}, err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO leafd_fence (biz_tag, server_id, server_uuid, epoch, token, gap) VALUES (?, ?, ?, ?, ?, ?)"+
		" ON DUPLICATE KEY UPDATE server_id = VALUES(server_id), server_uuid = VALUES(server_uuid), epoch = VALUES(epoch), token = VALUES(token), gap = VALUES(gap)",
		tag, r.self.id, r.self.uuid, next, randToken(), gap)
	if err != nil {
		return fenceRow{}, err
	}
	// Logged before the commit: if it fails, the next allocation finds the same and retries.
	s.log.Warn("segment: failover fence: database changed since the last range of the tag was granted; moving max_id forward by the safety gap",
		zap.String("tag", tag), zap.String("reason", reason), zap.String("server", r.self.String()),
		zap.Int64("max_id", r.maxID), zap.Int64("gap", gap), zap.Int64("floor", floor), zap.Int64("new_max_id", newMax), zap.Int64("epoch", next))
	s.pendingEpoch(tag, next)
	r.maxID = newMax
	return r, nil
}

// allocateLocked is the allocation after fence: the row is locked and its max_id and step
// known, so the UPDATE is the only statement left and the new max_id is computed, not read
// back (no other transaction can change the row before this one ends).
func (s *MySQLStore) allocateLocked(ctx context.Context, tx *sql.Tx, tag string, step int64, r fenceRow) (segment.Alloc, error) {
	size := step
	if size <= 0 {
		size = r.step
	}
	if size <= 0 {
		return segment.Alloc{}, fmt.Errorf("invalid stored step %d", r.step)
	}
	res, err := tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = max_id + ?, update_time = now() WHERE biz_tag = ?", size, tag)
	if err != nil {
		return segment.Alloc{}, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return segment.Alloc{}, err
	} else if n != 1 {
		return segment.Alloc{}, fmt.Errorf("allocation updated %d rows, want 1", n)
	}
	end := r.maxID + size
	// The high-water, in the same transaction (fence wrote the fence row if it was missing):
	// it survives a deletion of the leaf_alloc row, so a re-creation starts above it.
	if _, err := tx.ExecContext(ctx, "UPDATE leafd_fence SET max_end = GREATEST(max_end, ?) WHERE biz_tag = ?", end, tag); err != nil {
		return segment.Alloc{}, err
	}
	return segment.Alloc{MaxID: end, Step: r.step}, nil
}

// gap is how far max_id moves at a takeover: FailoverAllocs allocations of the largest step
// any instance may have used (the dynamic step is at most MaxStep or the stored step; a
// caller may have asked for more).
func (s *MySQLStore) gap(stored, step int64) int64 {
	return s.failoverAllocs * max(s.maxStep, stored, step, 1)
}

// takeoverGap is gap, raised to the largest gap any instance has recorded in the database
// row (recordGap): an instance with a smaller --max-step or --mysql-failover-allocs than
// the one that lost its ranges still jumps past them. A consistent (non-locking) read: the
// database row is only locked by Create.
func (s *MySQLStore) takeoverGap(ctx context.Context, tx *sql.Tx, stored, step int64) (int64, error) {
	g := s.gap(stored, step)
	var recorded sql.NullInt64
	err := tx.QueryRowContext(ctx, "SELECT gap FROM leafd_fence WHERE biz_tag = ?", dbFenceKey).Scan(&recorded)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	return max(g, recorded.Int64), nil
}

// --- the database row ----------------------------------------------------------------------

// dbFenceKey is the biz_tag of the database-wide fence row: the empty string, which
// ValidateTag forbids as a tag name. The row names the primary that created the last tag,
// and keeps in gap the largest safety gap any instance was configured with.
const dbFenceKey = ""

// recordGap writes this instance's gap into the database row (at open): it only ever raises
// it. A missing row is inserted only on a database whose leafd_fence is empty (a new
// database); on one with other rows the row's absence means a replica that missed it, which
// Create must see as a failover.
func (s *MySQLStore) recordGap(ctx context.Context) error {
	return s.recordGapOf(ctx, s.gap(0, 0), true)
}

// recordGapOf is recordGap with the gap g to record (adopt records 0: it allocates nothing)
// and whether a larger recorded gap is worth a warning.
func (s *MySQLStore) recordGapOf(ctx context.Context, g int64, warn bool) error {
	if _, err := s.db.ExecContext(ctx, "UPDATE leafd_fence SET gap = GREATEST(gap, ?) WHERE biz_tag = ?", g, dbFenceKey); err != nil {
		return err
	}
	var recorded sql.NullInt64
	err := s.db.QueryRowContext(ctx, "SELECT (SELECT gap FROM leafd_fence WHERE biz_tag = ?)", dbFenceKey).Scan(&recorded)
	if err != nil {
		return err
	}
	if recorded.Valid {
		if warn && recorded.Int64 != g {
			s.log.Warn("segment: failover fence: another instance uses a larger safety gap (--max-step × --mysql-failover-allocs); takeovers use the largest",
				zap.Int64("gap", g), zap.Int64("recorded_gap", recorded.Int64))
		}
		return nil
	}
	var others bool
	if err := s.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM leafd_fence)").Scan(&others); err != nil {
		return err
	}
	if others {
		return nil
	}
	expr, err := s.identExpr(ctx)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, "INSERT IGNORE INTO leafd_fence (biz_tag, server_id, server_uuid, epoch, token, gap) SELECT ?, "+expr+", 1, ?, ?",
		dbFenceKey, randToken(), g)
	return err
}

// createFence runs in Create's transaction before the insert: it locks the database row and
// returns how far above its START the new tag starts. When the row names another server,
// carries an epoch below one seen, or is missing on a database whose leafd_fence has other
// rows, the database failed over and may have lost tag creations: a tag created and used on
// the old primary, lost, and created again here would start again at its START. The row is
// then taken over (next epoch) in the same transaction. Every tag created in epoch e starts
// (e-1) gaps above its START (createOffset): the jump is not only for the first creation
// after the failover, since any later one may re-create a lost tag too.
//
// It also returns the database row's epoch, from which a shaped tag's row computes its own
// offset (rowOffset, shaperow.go); a takeover records its instant for that.
func (s *MySQLStore) createFence(ctx context.Context, tx *sql.Tx, step int64) (int64, int64, error) {
	expr, err := s.identExpr(ctx)
	if err != nil {
		return 0, 0, err
	}
	var self serverIdent
	var st mysqlcluster.State
	if err := tx.QueryRowContext(ctx, "SELECT "+expr+", "+s.clusterState()).Scan(&self.id, &self.uuid, &st); err != nil {
		return 0, 0, err
	}
	if err := s.checkCluster(ctx, st); err != nil {
		return 0, 0, err
	}
	var owner serverIdent
	var epoch, recorded int64
	found := true
	err = tx.QueryRowContext(ctx, "SELECT server_id, server_uuid, epoch, gap FROM leafd_fence WHERE biz_tag = ? FOR UPDATE", dbFenceKey).
		Scan(&owner.id, &owner.uuid, &epoch, &recorded)
	if errors.Is(err, sql.ErrNoRows) {
		found = false
	} else if err != nil {
		return 0, 0, err
	}
	seen := s.seenEpoch(dbFenceKey)
	// g only grows in the row: every generation's offset is at least the last one's plus the
	// gap it used.
	g := max(s.gap(step, 0), recorded)
	reason := ""
	switch {
	case !found:
		// The largest gap of a per-tag takeover stands in for the lost recorded one.
		var others, tagGap int64
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(MAX(gap), 0) FROM leafd_fence WHERE biz_tag <> ?", dbFenceKey).
			Scan(&others, &tagGap); err != nil {
			return 0, 0, err
		}
		g = max(g, tagGap)
		if others > 0 {
			reason = "no database fence row on a database with fence rows (a replica that missed it)"
		}
	case owner != self:
		reason = "the last tag was created on " + owner.String()
	case epoch < seen:
		reason = fmt.Sprintf("database fence epoch %d is below epoch %d seen before", epoch, seen)
	default:
		s.noteEpoch(dbFenceKey, epoch)
		if g > recorded {
			if _, err := tx.ExecContext(ctx, "UPDATE leafd_fence SET gap = ? WHERE biz_tag = ?", g, dbFenceKey); err != nil {
				return 0, 0, err
			}
		}
		return createOffset(g, epoch), epoch, nil
	}
	next := max(epoch, seen) + 1
	if reason != "" {
		next = max(next, 2) // a takeover: at least one gap above the tags' START
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO leafd_fence (biz_tag, server_id, server_uuid, epoch, token, gap) VALUES (?, ?, ?, ?, ?, ?)"+
		" ON DUPLICATE KEY UPDATE server_id = VALUES(server_id), server_uuid = VALUES(server_uuid), epoch = VALUES(epoch), token = VALUES(token), gap = VALUES(gap)",
		dbFenceKey, self.id, self.uuid, next, randToken(), g)
	if err != nil {
		return 0, 0, err
	}
	if reason != "" {
		if err := s.recordTakeover(ctx, tx, self, next); err != nil { // shaperow.go
			return 0, 0, err
		}
		s.log.Warn("segment: failover fence: database changed since the last tag creation; tags created from now on start past one more safety gap",
			zap.String("reason", reason), zap.String("server", self.String()), zap.Int64("gap", g), zap.Int64("epoch", next),
			zap.Int64("offset", createOffset(g, next)))
	}
	s.pendingEpoch(dbFenceKey, next)
	return createOffset(g, next), next, nil
}

// createOffset is how far above its START a tag created in database generation epoch starts:
// one gap per takeover of the database row. A tag created (and used for at most
// FailoverAllocs allocations) in generation e and lost at the failover is created again in
// a later generation at least one gap higher.
func createOffset(g, epoch int64) int64 {
	if epoch <= 1 {
		return 0
	}
	if g > segment.MaxRangeEnd/(epoch-1) {
		return segment.MaxRangeEnd // Create refuses it (ErrLimit)
	}
	return g * (epoch - 1)
}

// noteNotAdopted logs a refused fence-less tag at most once a minute per tag (the requests
// of a busy tag retry its load every RetryBackoff).
func (s *MySQLStore) noteNotAdopted(tag string, r fenceRow) {
	now := time.Now()
	s.epochMu.Lock()
	last, ok := s.refusedAt[tag]
	if !ok || now.Sub(last) >= time.Minute {
		if len(s.refusedAt) >= 4096 {
			clear(s.refusedAt) // bounded: names come from the table, not from clients
		}
		s.refusedAt[tag] = now
	}
	s.epochMu.Unlock()
	if ok && now.Sub(last) < time.Minute {
		return
	}
	s.log.Warn("segment: tag not adopted: its leaf_alloc row has no leafd_fence row; refusing it until `leafd adopt` runs on the primary (docs/MYSQL.md, \"Adopting a Leaf table\")",
		zap.String("tag", tag), zap.Int64("max_id", r.maxID), zap.String("server", r.self.String()))
}

// seenEpoch is the highest fence epoch of tag this process has seen committed.
func (s *MySQLStore) seenEpoch(tag string) int64 {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	return s.epochs[tag]
}

func (s *MySQLStore) noteEpoch(tag string, e int64) {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	if e > s.epochs[tag] {
		s.epochs[tag] = e
	}
}

// pendingEpoch remembers the epoch a takeover is about to commit; the caller notes it once
// the commit succeeded (a rolled back takeover must not raise what we believe was seen).
func (s *MySQLStore) pendingEpoch(tag string, e int64) {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	s.pending[tag] = e
}

// commitEpoch moves tag's pending epoch, if any, to the seen ones (after COMMIT), and
// dropPending forgets it (after a rollback).
func (s *MySQLStore) commitEpoch(tag string) {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	if e, ok := s.pending[tag]; ok {
		delete(s.pending, tag)
		if e > s.epochs[tag] {
			s.epochs[tag] = e
		}
	}
}

func (s *MySQLStore) dropPending(tag string) {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	delete(s.pending, tag)
}

func randToken() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
}

// createFenceRow writes the fence row of a tag created by leafd, in the transaction that
// inserts its leaf_alloc row, so that a new tag does not take the gap on its first
// allocation. A replica that lacks this row lacks the tag too.
func (s *MySQLStore) createFenceRow(ctx context.Context, tx *sql.Tx, tag string) error {
	expr, err := s.identExpr(ctx)
	if err != nil {
		return err
	}
	var self serverIdent
	if err := tx.QueryRowContext(ctx, "SELECT "+expr).Scan(&self.id, &self.uuid); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO leafd_fence (biz_tag, server_id, server_uuid, epoch, token, gap) VALUES (?, ?, ?, 1, ?, 0)"+
		" ON DUPLICATE KEY UPDATE server_id = VALUES(server_id), server_uuid = VALUES(server_uuid), epoch = epoch + 1, token = VALUES(token), gap = 0",
		tag, self.id, self.uuid, randToken())
	return err
}

// Lease implements segment.Lessor: CreateAllocate when the request creates, else the next
// range through AllocateAbove when there is a floor. A range below the floor is then rolled
// back and returned without error, so that the generator's regression check refuses, counts
// and logs it as for any other store; nothing of it was committed.
func (s *MySQLStore) Lease(ctx context.Context, r segment.LeaseRequest) (segment.Lease, error) {
	if r.Create != nil {
		a, created, err := s.CreateAllocate(ctx, *r.Create, r.Step, r.Floor)
		return segment.Lease{Alloc: a, Created: created}, err
	}
	a, err := s.allocateFloor(ctx, r.Tag, r.Step, r.Floor)
	return segment.Lease{Alloc: a}, err
}

// allocateFloor leases the next range of tag, through AllocateAbove when floor > 0: a range
// below floor comes back uncommitted and without error.
func (s *MySQLStore) allocateFloor(ctx context.Context, tag string, step, floor int64) (segment.Alloc, error) {
	if floor <= 0 {
		return s.Allocate(ctx, tag, step)
	}
	a, err := s.AllocateAbove(ctx, tag, step, floor)
	var below *belowFloorError
	if errors.As(err, &below) {
		return below.alloc, nil
	}
	return a, err
}

// belowFloorError is AllocateAbove's refusal: the range the store would have leased (rolled
// back) starts below the floor.
type belowFloorError struct {
	tag   string
	alloc segment.Alloc
	start int64
	floor int64
}

func (e *belowFloorError) Error() string {
	return fmt.Sprintf("segment: range [%d, %d) of tag %q starts below the floor %d; rolled back", e.start, e.alloc.MaxID, e.tag, e.floor)
}

func (e *belowFloorError) Unwrap() error { return segment.ErrRegression }
