package mysqlstore

// Semi-synchronous replication: the primary's state as the store reads it
// (MySQLConfig.RequireSemiSync).

// (A little over 500 lines: the fence's rules and the statements that apply them are kept
// together; see the comment below.)

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
	"database/sql"
	"fmt"
	"strings"

	"github.com/leafd/leafd/segment"
)

// semiSync is the primary's semi-sync state: whether it is on, and how many commits it has
// made without a replica's acknowledgement.
type semiSync struct {
	known bool // the status variables exist (semi-sync available)
	on    bool
	noTx  int64
}

// readSemiSync reads Rpl_semi_sync_master_* (MariaDB, MySQL before 8.0.26) or
// Rpl_semi_sync_source_* (MySQL 8.0.26+).
func readSemiSync(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (semiSync, error) {
	rows, err := q.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl\\_semi\\_sync\\_%'")
	if err != nil {
		return semiSync{}, err
	}
	defer rows.Close()
	var st semiSync
	for rows.Next() {
		var name, val string
		if err := rows.Scan(&name, &val); err != nil {
			return semiSync{}, err
		}
		switch strings.ToLower(name) {
		case "rpl_semi_sync_master_status", "rpl_semi_sync_source_status":
			st.known = true
			st.on = strings.EqualFold(val, "ON")
		case "rpl_semi_sync_master_no_tx", "rpl_semi_sync_source_no_tx":
			_, _ = fmt.Sscan(val, &st.noTx)
		}
	}
	return st, rows.Err()
}

// errSemiSyncOff is the refusal when RequireSemiSync is set and the primary is not (or no
// longer) replicating semi-synchronously.
func errSemiSyncOff(tag, what string) error {
	return &segment.TagError{Tag: tag, Err: segment.ErrUnavailable,
		Detail: "semi-synchronous replication required (--mysql-require-semisync) but " + what + "; refusing to lease"}
}
