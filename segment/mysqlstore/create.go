package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/storekit"
)

// Tag creation on MySQL, committed together (group commit). Every creation locks the
// database fence row (createFence), so creations from all instances run one at a time, one
// transaction and one redo-log flush each: about 500 new tags/s. Here the creations waiting
// when the previous batch ends run in one transaction, with every check of a single creation
// made for each tag of the batch, by one statement over the batch's names:
//
//   - the shape check: SELECT ... FROM leafd_tag_shape WHERE biz_tag IN (...) FOR UPDATE;
//   - the database fence: createFence, once (its lock and its offset are the same for every
//     tag of the transaction);
//   - the existing rows: SELECT ... FROM leaf_alloc WHERE biz_tag IN (...) FOR UPDATE;
//   - the high-water: SELECT ... FROM leafd_fence WHERE biz_tag IN (...) FOR UPDATE;
//   - one INSERT of the rows, one INSERT of their fence rows.
//
// REPEATABLE READ, as for a single creation: the locks of the missing keys are gap locks.
// Only the common case is batched: a batch that finds a shape, a high-water (a tag created
// again), a row matched by another spelling (the collation), or any error, is rolled back and
// each of its creations runs alone through Create's own transaction (createUncommitted),
// which decides each case as before. A tag whose row exists (spelled as asked) is
// ErrTagExists and does not stop the others. A deadlock victim runs the batch again.
//
// A creation of a first load (CreateAllocate) also leases the tag's first range in the same
// transaction: the row is inserted with max_id at the end of that range and its fence row
// with that high-water, which is what the separate allocation would have written.

// maxCreateBatch bounds the creations of one transaction (and the IN lists).
const maxCreateBatch = 64

type createOp struct {
	t    segment.Tag
	size int64 // > 0: also lease the first range [start, start+size)

	created   bool          // the row was inserted by this op
	allocated bool          // and its first range leased: a
	a         segment.Alloc //
	err       error
	done      chan struct{}
}

// createGroup queues creations for the committer goroutine (running while any wait).
type createGroup struct {
	mu      sync.Mutex
	queue   []*createOp
	running bool
	wg      sync.WaitGroup

	batches, batched, solo uint64 // under mu: for tests and the benchmark
}

// errBatchFallback: the batch met a case it leaves to single creations.
var errBatchFallback = errors.New("segment: creation batch falls back to single creations")

// create queues t (checked by checkStoreTag) and waits for its outcome or ctx.
func (s *MySQLStore) create(ctx context.Context, t segment.Tag, size int64) *createOp {
	op := &createOp{t: t, size: size, done: make(chan struct{})}
	g := &s.creates
	g.mu.Lock()
	g.queue = append(g.queue, op)
	if !g.running {
		g.running = true
		g.wg.Add(1)
		go s.createLoop()
	}
	g.mu.Unlock()
	select {
	case <-op.done:
		return op
	case <-ctx.Done():
		return &createOp{t: t, err: ctx.Err()}
	}
}

func (s *MySQLStore) createLoop() {
	g := &s.creates
	defer g.wg.Done()
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxCreateBatch)
		if n == 0 {
			g.running = false
			g.queue = nil
			g.mu.Unlock()
			return
		}
		ops := g.queue[:n:n]
		g.queue = g.queue[n:]
		g.mu.Unlock()
		s.runCreates(ops)
		for _, op := range ops {
			close(op.done)
		}
	}
}

// runCreates decides every op of one batch: together when it can, else one by one.
func (s *MySQLStore) runCreates(ops []*createOp) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	_ = s.ensureTable(ctx)
	// One op per name, whatever the letter case; the others run alone afterwards (an exact
	// repeat then finds the row: ErrTagExists).
	var batch, later []*createOp
	seen := make(map[string]bool, len(ops))
	for _, op := range ops {
		k := strings.ToLower(op.t.Name)
		// An ORDERED creation inserts its leafd_leader row in its transaction (createUncommitted);
		// the batch does not, so it runs alone: batched, the tag would be created ordinary.
		if seen[k] || op.t.Ordered {
			later = append(later, op)
			continue
		}
		seen[k] = true
		batch = append(batch, op)
	}
	// A lone creation that leases too (a first load) takes the batch's transaction all the
	// same: the row, its fence row and its first range in one commit.
	if (len(batch) > 1 || len(batch) == 1 && batch[0].size > 0) && !s.requireSemiSync {
		// The whole transaction, COMMIT included: one rolled back whole by the server (a
		// deadlock victim, a certification conflict at COMMIT) runs again (retryDeadlock).
		committing := false
		err := s.retryDeadlock(ctx, "create batch", "", func(ctx context.Context) error {
			committing = false
			tx, err := s.createBatchUncommitted(ctx, batch)
			if err != nil {
				return err
			}
			committing = true
			if err = tx.Commit(); err != nil {
				s.dropPending(dbFenceKey)
			}
			return err
		})
		// A COMMIT rolled back every time (mysqlcluster.RolledBack) applied nothing: the ops
		// run one by one below, as after any other failure before COMMIT.
		if err == nil || (committing && !mysqlcluster.RolledBack(err)) {
			if err != nil {
				// Ambiguous: perhaps applied. Every op fails; a retry finds the rows it
				// created (ErrTagExists) and its fence rows' high-water covers the ranges.
				s.dropPending(dbFenceKey)
				for _, op := range batch {
					if op.err == nil {
						op.created, op.allocated = false, false
						op.err = s.wrap("create: commit", op.t.Name, err)
					}
				}
			} else {
				s.commitEpoch(dbFenceKey)
				for _, op := range batch {
					if op.created && s.failoverAllocs > 0 {
						s.noteEpoch(op.t.Name, 1)
					}
				}
			}
			s.creates.mu.Lock()
			s.creates.batches++
			s.creates.batched += uint64(len(batch))
			s.creates.mu.Unlock()
			batch = nil
		} else if !errors.Is(err, errBatchFallback) {
			s.log.Debug("segment: creation batch failed; creating one by one", zap.Int("tags", len(batch)), zap.Error(err))
		}
	}
	for _, op := range append(batch, later...) {
		// Each its own timeout: a batch that fell back runs up to maxCreateBatch creations one
		// after another, and the batch's context would time out the later ones.
		octx, ocancel := context.WithTimeout(context.Background(), s.timeout)
		op.created, op.allocated, op.err = false, false, s.createSolo(octx, op.t)
		ocancel()
		op.created = op.err == nil
		s.creates.mu.Lock()
		s.creates.solo++
		s.creates.mu.Unlock()
	}
}

// createSolo is one creation in its own transaction (Create before batching).
func (s *MySQLStore) createSolo(ctx context.Context, t segment.Tag) error {
	// The whole transaction, COMMIT included; one rolled back whole by the server (a deadlock
	// victim, a certification conflict at COMMIT) runs again (retryDeadlock), from the tag as
	// asked (createUncommitted raises its START on a copy).
	op := "create"
	err := s.retryDeadlock(ctx, op, t.Name, func(ctx context.Context) error {
		op = "create"
		tx, err := s.createUncommitted(ctx, t)
		if err != nil {
			return err
		}
		if err = tx.Commit(); err != nil {
			op = "create: commit"
			s.dropPending(dbFenceKey)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, segment.ErrLimit) || errors.Is(err, segment.ErrShaped) {
			return err
		}
		return s.wrap(op, t.Name, err)
	}
	s.commitEpoch(dbFenceKey)
	return nil
}

// createBatchUncommitted runs the batch's transaction up to COMMIT and sets each op's
// outcome (applied only if the caller's COMMIT succeeds). errBatchFallback, or any other
// error, rolls it back with no op decided.
func (s *MySQLStore) createBatchUncommitted(ctx context.Context, ops []*createOp) (_ *sql.Tx, err error) {
	for _, op := range ops {
		op.created, op.allocated, op.a, op.err = false, false, segment.Alloc{}, nil
	}
	if err := s.beforeTx(ctx); err != nil {
		return nil, err
	}
	if err := s.ensureShapeTable(ctx); err != nil { // see createUncommitted
		return nil, err
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: s.createIsolation()})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
			s.dropPending(dbFenceKey)
		}
	}()
	names := make([]any, len(ops))
	for i, op := range ops {
		names[i] = op.t.Name
	}
	in := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(ops)), ", ") + ")"

	// The shape check (shapedLocked for each name, and for the prefix of a plain tag@x).
	shapeNames := names
	for _, op := range ops {
		if base, ok := storekit.ShapedBase(op.t); ok {
			shapeNames = append(shapeNames[:len(shapeNames):len(shapeNames)], base)
		}
	}
	shapeIn := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(shapeNames)), ", ") + ")"
	found, err := lockedNames(ctx, tx, "SELECT biz_tag FROM leafd_tag_shape WHERE biz_tag IN "+shapeIn+" FOR UPDATE", shapeNames)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == mysqlErrNoSuchTable {
		found, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check shape: %w", err)
	}
	if len(found) > 0 {
		return nil, errBatchFallback
	}
	var jump, epoch int64
	var self serverIdent
	if s.failoverAllocs > 0 {
		var most int64
		for _, op := range ops {
			most = max(most, op.t.Step)
		}
		if jump, epoch, err = s.createFence(ctx, tx, most); err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
		expr, err := s.identExpr(ctx)
		if err != nil {
			return nil, err
		}
		if err := tx.QueryRowContext(ctx, "SELECT "+expr).Scan(&self.id, &self.uuid); err != nil {
			return nil, err
		}
	}
	// Existing rows, in the allocation's lock order (leaf_alloc before leafd_fence).
	found, err = lockedNames(ctx, tx, "SELECT biz_tag FROM leaf_alloc WHERE biz_tag IN "+in+" FOR UPDATE", names)
	if err != nil {
		return nil, err
	}
	exists := make(map[string]bool, len(found))
	for _, f := range found {
		exists[f] = true
	}
	var insert []*createOp
	for _, op := range ops {
		if exists[op.t.Name] {
			op.err = fmt.Errorf("%w %q", segment.ErrTagExists, op.t.Name)
			delete(exists, op.t.Name)
			continue
		}
		insert = append(insert, op)
	}
	if len(exists) > 0 {
		return nil, errBatchFallback // a row of another spelling (the collation matched it)
	}
	if s.failoverAllocs > 0 && len(insert) > 0 {
		// The high-water of an earlier life of any of the tags: left to the single creation.
		names = names[:0]
		for _, op := range insert {
			names = append(names, op.t.Name)
		}
		in = "(" + strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ") + ")"
		found, err = lockedNames(ctx, tx, "SELECT biz_tag FROM leafd_fence WHERE biz_tag IN "+in+" FOR UPDATE", names)
		if err != nil {
			return nil, fmt.Errorf("high-water: %w", err)
		}
		if len(found) > 0 {
			return nil, errBatchFallback
		}
	}
	var rows, fences strings.Builder
	var rowArgs, fenceArgs []any
	n := 0
	type rowKey struct{ start, step int64 }
	rowJumps := map[rowKey]int64{} // shaped tags' rows of one period and step share a jump
	for _, op := range insert {
		t := op.t
		jump := jump
		if t.Row != nil && s.failoverAllocs > 0 {
			k := rowKey{t.Row.PeriodStart.UnixNano(), t.Step}
			j, ok := rowJumps[k]
			if !ok {
				if j, err = s.rowOffset(ctx, tx, epoch, t); err != nil {
					return nil, fmt.Errorf("fence: %w", err)
				}
				rowJumps[k] = j
			}
			jump = j
		}
		if jump > segment.MaxRangeEnd-t.MaxID {
			op.err = fmt.Errorf("%w: start %d + failover gap %d overflows", segment.ErrLimit, t.MaxID, jump)
			continue
		}
		start := t.MaxID + jump
		maxID := start
		// A first range past the largest ID is left to the allocation after the creation
		// (CreateAllocate), which reports it as for any allocation.
		if op.size > 0 && op.size <= segment.MaxRangeEnd-start {
			maxID = start + op.size
			op.allocated, op.a = true, segment.Alloc{MaxID: maxID, Step: t.Step}
		}
		op.created = true
		if n > 0 {
			rows.WriteString(", ")
			fences.WriteString(", ")
		}
		n++
		rows.WriteString("(?, ?, ?, ?, now())")
		rowArgs = append(rowArgs, t.Name, maxID, t.Step, sql.NullString{String: t.Description, Valid: t.Description != ""})
		fences.WriteString("(?, ?, ?, 1, ?, 0, ?)")
		var maxEnd int64
		if op.allocated {
			maxEnd = maxID
		}
		fenceArgs = append(fenceArgs, t.Name, self.id, self.uuid, randToken(), maxEnd)
	}
	if n == 0 {
		return tx, nil
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO leaf_alloc (biz_tag, max_id, step, description, update_time) VALUES "+rows.String(), rowArgs...); err != nil {
		return nil, err
	}
	if s.failoverAllocs > 0 {
		if _, err := tx.ExecContext(ctx, "INSERT INTO leafd_fence (biz_tag, server_id, server_uuid, epoch, token, gap, max_end) VALUES "+fences.String(), fenceArgs...); err != nil {
			return nil, err
		}
	}
	return tx, nil
}

// lockedNames runs a SELECT biz_tag ... FOR UPDATE and returns the names found.
func lockedNames(ctx context.Context, tx *sql.Tx, q string, args []any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// CreateAllocate leases the next range of t.Name and, when the tag has no row, creates it
// first: the creation and the first range in one transaction shared with the concurrent
// creations (see above). A range below floor is returned without error (like allocateFloor).
func (s *MySQLStore) CreateAllocate(ctx context.Context, t segment.Tag, step, floor int64) (segment.Alloc, bool, error) {
	// A plain read first (no lock, no transaction): an allocation that finds no row would
	// hold a gap lock of leaf_alloc until its rollback, and the batch's INSERT into that gap
	// would wait for it. The batch checks again, under its locks.
	switch _, err := s.MaxID(ctx, t.Name); {
	case err == nil:
		return allocateExisting(ctx, s, t.Name, step, floor)
	case !errors.Is(err, segment.ErrUnknownTag):
		return segment.Alloc{}, false, err
	}
	t, err := storekit.CheckTag(t)
	if err != nil {
		return segment.Alloc{}, false, err
	}
	size := step
	if size <= 0 {
		size = t.Step
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	op := s.create(ctx, t, size)
	switch {
	case op.err == nil && op.allocated:
		return op.a, true, nil
	case op.err == nil, errors.Is(op.err, segment.ErrTagExists):
		// Created alone (no range), or by another caller: lease as any allocation does.
		a, err := s.allocateFloor(ctx, t.Name, step, floor)
		return a, op.err == nil && op.created, err
	}
	return segment.Alloc{}, false, op.err
}

func allocateExisting(ctx context.Context, s *MySQLStore, tag string, step, floor int64) (segment.Alloc, bool, error) {
	a, err := s.allocateFloor(ctx, tag, step, floor)
	return a, false, err
}

// CreateBatches reports the creation batches committed, the creations in them, and the
// creations that ran alone.
func (s *MySQLStore) CreateBatches() (batches, batched, solo uint64) {
	s.creates.mu.Lock()
	defer s.creates.mu.Unlock()
	return s.creates.batches, s.creates.batched, s.creates.solo
}
