package boltstore

import (
	"context"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// boltGroup commits the write transactions of concurrent callers together: one bbolt
// read-write transaction, and so one fsync, for every operation waiting when the previous
// commit ends (group commit). bbolt has one writer and fsyncs each commit, so one commit per
// call would make tag creation cost an fsync each (docs/BENCHMARKS.md, "Tag creation", gives
// the rate and its target); a caller waits for at most the commit running when it arrives
// and the one it joins, and nothing waits for a timer (bbolt's own DB.Batch waits
// MaxBatchDelay to gather a batch).
//
// The contract of an operation, which every caller in this package keeps: fn returns an
// error only before it writes anything it needs undone (a check refusing it). Its error is
// its own: it neither rolls back nor fails the other operations of the batch. A failure of the
// transaction itself (its commit, a panic) is every operation's error; bbolt rolls the whole
// transaction back then, so none of them was applied.
//
// The committer goroutine runs only while operations wait; Close waits for it.
type boltGroup struct {
	db  *bolt.DB
	max int // operations per transaction

	mu      sync.Mutex
	queue   []*groupOp
	running bool // a committer goroutine runs
	wg      sync.WaitGroup

	commits, ops uint64 // under mu: transactions committed, operations in them (tests)
}

type groupOp struct {
	fn   func(tx *bolt.Tx) error
	err  error
	done chan struct{}
}

// maxGroup bounds the operations of one transaction: a few hundred rows write in well under
// a millisecond, and a bound keeps one commit from growing without limit under a flood.
const maxGroup = 512

func newBoltGroup(db *bolt.DB) *boltGroup { return &boltGroup{db: db, max: maxGroup} }

// update runs fn in a shared read-write transaction and returns its error once that
// transaction is committed (or failed), or ctx's error when ctx ends first. bbolt cannot
// cancel a transaction: an operation abandoned on ctx still commits or fails by itself (an
// Allocate then leases a range nobody uses: a gap).
func (g *boltGroup) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	op := &groupOp{fn: fn, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, op)
	if !g.running {
		g.running = true
		g.wg.Add(1)
		go g.commitLoop()
	}
	g.mu.Unlock()
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// commitLoop commits the queue, batch after batch, and ends when it is empty.
func (g *boltGroup) commitLoop() {
	defer g.wg.Done()
	for {
		g.mu.Lock()
		n := min(len(g.queue), g.max)
		if n == 0 {
			g.running = false
			g.queue = nil
			g.mu.Unlock()
			return
		}
		ops := g.queue[:n:n]
		g.queue = g.queue[n:]
		g.mu.Unlock()

		err := g.db.Update(func(tx *bolt.Tx) error {
			for _, op := range ops {
				if err := callOp(op, tx); err != nil {
					return err // a panic: the whole transaction is rolled back
				}
			}
			return nil
		})
		g.mu.Lock()
		if err == nil {
			g.commits++
			g.ops += uint64(len(ops))
		}
		g.mu.Unlock()
		for _, op := range ops {
			if err != nil {
				op.err = err
			}
			close(op.done)
		}
	}
}

// callOp runs one operation; its error is its own, a panic fails the transaction.
func callOp(op *groupOp, tx *bolt.Tx) (txErr error) {
	defer func() {
		if r := recover(); r != nil {
			txErr = fmt.Errorf("segment: bolt operation panicked: %v", r)
		}
	}()
	op.err = op.fn(tx)
	return nil
}

// wait waits for the committer goroutine to end (Close, after the last caller returned).
func (g *boltGroup) wait() { g.wg.Wait() }

// stats returns the transactions committed and the operations in them.
func (g *boltGroup) stats() (commits, ops uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.commits, g.ops
}
