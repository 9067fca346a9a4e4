package testenv

import (
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// ErrConflict is the answer of a Galera member to a statement it rolled back whole (a
// certification conflict, 1213), as ConflictDB injects it.
var ErrConflict = &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock (injected)"}

// ConflictDB opens the database of cfg through a FaultConnector that answers ErrConflict to
// each statement run outside a transaction that match accepts, as long as the counter it
// returns is above zero (each answer takes one). The counter starts at zero: the test sets
// how many conflicts come. The database is closed at cleanup.
func ConflictDB(t testing.TB, cfg *mysql.Config, match func(query string) bool) (*sql.DB, *atomic.Int64) {
	t.Helper()
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := new(atomic.Int64)
	db := sql.OpenDB(FaultConnector(c, Faults{Exec: func(q string) error {
		if match(q) && n.Add(-1) >= 0 {
			return ErrConflict
		}
		return nil
	}}))
	t.Cleanup(func() { _ = db.Close() })
	return db, n
}
