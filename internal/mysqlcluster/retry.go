package mysqlcluster

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	// errDeadlock is ER_LOCK_DEADLOCK: a deadlock victim, or on Galera a certification
	// conflict (at any statement, COMMIT included) or a transaction aborted by a replicated
	// one. Either way the server rolled the whole transaction back, on every member.
	errDeadlock = 1213
	// errRollbackDuringCommit is ER_TRANSACTION_ROLLBACK_DURING_COMMIT: MySQL Group
	// Replication's certification conflict at COMMIT; the transaction was rolled back.
	errRollbackDuringCommit = 3101
)

// Attempts bounds Retry: a transaction is tried at most this many times.
const Attempts = 5

// RolledBack reports whether err is the server's answer that it rolled the whole
// transaction back (a deadlock victim or a certification conflict), so that nothing of it
// was applied anywhere and running it again is the same as running it once. A lost
// connection, a timeout or any other error is not: a COMMIT without an answer may have been
// applied.
func RolledBack(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errRollbackDuringCommit)
}

// Retry runs fn, a whole transaction up to and including its COMMIT (or one autocommit
// statement), again when it fails with RolledBack, ErrNoIdentity or ErrGeneration: at most
// Attempts times, with a short random pause that grows with each attempt so that the
// transactions that met do not meet again in step, and never past ctx. onRetry (may be nil)
// is told of each retry. Any other error is returned at once.
func Retry(ctx context.Context, onRetry func(attempt int, err error), fn func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if !(RolledBack(err) || errors.Is(err, ErrNoIdentity) || errors.Is(err, ErrGeneration)) || attempt == Attempts {
			return err
		}
		if onRetry != nil {
			onRetry(attempt, err)
		}
		pause := time.Duration(1+rand.IntN(10*attempt)) * time.Millisecond
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
