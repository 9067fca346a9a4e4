// Package snowflake generates Leaf-compatible snowflake IDs: 63-bit integers made of the time in
// milliseconds since an epoch, a worker id and a per-millisecond sequence.
//
// Default layout (Leaf's, configurable with Layout):
//
//	 63  62                                       22 21          12 11            0
//	+---+-------------------------------------------+--------------+---------------+
//	| 0 |  41 bits: milliseconds since the epoch    | 10 bits:     | 12 bits:      |
//	|   |  (epoch 1288834974657 = 2010-11-04 01:42Z)| worker id    | sequence      |
//	+---+-------------------------------------------+--------------+---------------+
//
//	id = (ms - epoch) << (WorkerBits+SeqBits) | workerID << SeqBits | sequence
//
// The sign bit is always 0: a millisecond that does not fit in TimeBits is ErrOverflow, never a
// wrapped or negative ID.
//
// # Uniqueness
//
// Two IDs are equal only if time, worker id and sequence are equal. So uniqueness needs:
//
//   - one issuer per worker id at any time: the WorkerSource's job (see the ZooKeeper source,
//     package snowflake/zk, for the fencing argument when ids can move between instances);
//   - within one process, never the same (millisecond, sequence) twice: the generator keeps the
//     last millisecond and sequence under a mutex; a clock that moves back by at most MaxBackward
//     is waited out (up to twice the offset), further back is ErrClockBack;
//   - across restarts of the same worker id (Leaf #216: a restart with a rolled-back clock), a
//     time lease: the generator only issues in milliseconds < reserved_until, and it durably
//     persists a later reserved_until through WorkerSource.Extend before the clock gets there. A
//     new run waits until its clock is strictly past the bound persisted by the previous run, so
//     the millisecond ranges of two runs never overlap, whatever the clock did in between.
//
// Extensions run in a background goroutine when two thirds of LeaseWindow or less are left, so
// Next normally does no I/O and never holds its lock across I/O, and an extension has two thirds
// of the window to complete before a request reaches the bound. A request at the bound waits (at
// most MaxWait) for an extension in flight, also when the previous attempt failed.
//
// New retries an Acquire that fails with ErrSourceUnavailable for up to ExtendTimeout, so a
// transient failure (a dropped ZooKeeper connection during the start) does not leave a freshly
// started instance in the no-worker state.
//
// # No-worker state
//
// When the source cannot give a worker id yet (its Acquire fails with an error matching
// ErrSourceUnavailable, ZooKeeper unreachable and no usable local state, or ErrWorkerHeld, the id
// held by another live process), New still returns a generator. It keeps acquiring in the
// background; meanwhile Next returns an error matching ErrNoWorker. The same holds while the
// clock has not yet passed the start bound: New does not wait for it (a server listens and serves
// segment IDs meanwhile). Any other Acquire error (lock held by another process, worker id out of
// range, ids exhausted, clock further behind the persisted bound than MaxStartWait) fails New.
package snowflake
