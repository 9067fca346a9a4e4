// Package segment implements Leaf's segment mode: IDs are served from number ranges
// ("segments") leased from a Store, with a double buffer per tag so that the next range is
// loaded in the background while the current one is consumed.
//
// Guarantees: an ID is only ever served from a range the store has durably leased to this
// instance; IDs of one tag are strictly increasing within one Generator (also across
// segments); gaps are allowed (restarts, abandoned remainders, dropped tags).
//
// Design, and why:
//
//   - The current segment of a tag is an immutable object published by an atomic pointer; its
//     cursor is an atomic.Int64 inside the same object. A taker compares its candidate with the
//     bound of the object it took the candidate from, so the switch hazard of a reused mutable
//     slot (Leaf's reason for its read lock) cannot occur. The hot path takes no lock and
//     allocates nothing.
//   - Refills run on a bounded loader pool owned by the Generator. Exactly one load per tag
//     runs at a time; whoever sets the "loading" state clears it: the loader when the load
//     ends, or the submitter when the pool rejects the job. A caller that stops waiting never
//     touches it.
//   - Regression guard: before a new range is published its start is compared with the
//     durable mark (Marks) of the highest range end ever granted to this instance; a range
//     below it is refused (ErrRegression), otherwise the mark is raised durably first.
//   - The step adapts like Leaf's: doubled when a segment lasted less than
//     Config.SegmentDuration, kept under twice that, halved (not below the stored step) above.
package segment
