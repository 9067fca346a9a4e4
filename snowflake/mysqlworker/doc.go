// Package mysqlworker is the MySQL worker-id source of the snowflake generator: worker ids
// leased from the table leafd_worker (CreateTable) in the database segment mode already uses,
// so that instances sharing one MySQL need no ZooKeeper. The snowflake core does not import
// this package (nor the driver): cmd/leafd builds a Source and hands it to snowflake.New.
//
// # Acquisition (compare-and-set)
//
// Acquire lists the rows and takes the data dir's previous id when it is free, else the lowest
// free row (released, or lease_expires <= UTC_TIMESTAMP(3) on the database's clock), by
//
//	UPDATE ... SET token=<new>, epoch=epoch+1, version=version+1, lease_expires=UTC_TIMESTAMP(3)+lease
//	WHERE worker_id=? AND version=<read> AND (token='' OR lease_expires<=UTC_TIMESTAMP(3))
//
// else the lowest id without a row by INSERT, which the primary key decides (never max+1).
// Every write bumps version, so the reserved_until read with the row is the row's bound as
// taken. When every id of the layout is leased the error is ErrIDsExhausted (wrapping
// snowflake.ErrWorkerHeld: NOWORKER, retried in the background), never a wrap. A dead
// instance's id comes free when its lease runs out, so ids are reused.
//
// # Fences
//
//  1. The holder's writes (renewal, bound, release) are fenced on (token, epoch): once a taker
//     has changed them, the old holder's next write matches no row and it stops at once
//     (snowflake.ErrWorkerLost: the generator acquires again, as a new start would).
//  2. Self-fence, send time: a renewal confirmed by the database gives a deadline of its SEND
//     time (clock.Now, monotonic for the real clock) plus Lease; the database set the lease
//     from its UTC_TIMESTAMP(3) at execution, later than the send, so the deadline is never after the
//     expiry any other instance can see. Extend accepts an until only within that deadline,
//     so the generator (which issues only below the until it had accepted) stops in time.
//     Past the deadline (a SIGSTOP, a long outage) Extend and the renewals re-acquire the row
//     by compare-and-set on (token, epoch) and then refuse for Lease+Margin like a taker; if
//     the row was taken meanwhile, the id is lost.
//  3. The bound carried in the row: Extend writes reserved_until (GREATEST: never lowered)
//     in the row before the generator may issue below it; a taker's start bound is at least
//     the row's, whatever its clock says.
//  4. The taker's wait: a taker's start bound is also at least its clock at the acquisition
//     plus Lease+Margin (Config.TakerWait), so it issues nothing before.
//
// # Database failover
//
// With asynchronous replication a promoted replica can miss the last writes: renewals,
// bounds, even whole acquisitions. What that can cost, and why it costs no duplicate:
// a holder H's IDs are all in milliseconds below an until that H accepted, and H accepts an
// until only within Lease of the send time s of a renewal the (old) primary confirmed, so
// every ID of H is below wall_H(s)+Lease. Any write the new primary lacks was sent before the
// failover, so before a taker T's acquisition on the new primary; T issues only from
// wall_T(acquisition)+Lease+Margin. So T's IDs are above H's as long as H's clock is not ahead
// of T's by Margin or more, whatever rows were lost; when the rows were not lost, the bound
// in the row (fence 3) covers any skew. The same holds for H itself after its lease ran out
// (fence 2's re-acquisition waits Lease+Margin). The assumption: the failover fences the old
// primary (it accepts no write once the new one does), as segment mode's failover fence
// assumes; with two writable primaries no lease in a database can be safe. The cost is
// availability: every acquisition issues only after Lease+Margin (7s by default).
//
// An ambiguous write (timed out, maybe applied) counts as applied: an acquisition is read back
// by its token before anything else is taken; a renewal may have raised the row's bound but does
// not move the deadline (the last confirmed send does); a re-acquisition is read back before the
// next write. Within the confirmed lease the data dir alone records the bound during a database
// outage (a taker's wait covers it), so a short failover does not stop issuing.
//
// The argument rests on no identity of the database, so it covers any loss of writes alike: a
// Galera cluster bootstrapped again from a member that lacked commits (the same state UUID,
// a lower seqno) is to this package what a promoted replica is, a lost row costing a
// re-acquisition (fence 1) and every acquisition its wait (fence 4).
//
// # Local state
//
// The data dir's snowflake.json (locked, shared with every source) records the id, source
// "mysql" and the bound; its bound is honoured by every later start on the data dir, with
// any source.
package mysqlworker
