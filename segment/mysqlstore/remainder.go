package mysqlstore

// The MySQL store's side of the remainder file (segment/remainder.go): the database's identity
// and the durable record of consumed remainder files, in leafd's own table leafd_remainder.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/segment"
)

var _ segment.RemainderStore = (*MySQLStore)(nil)

// mysqlCreateRemainder is leafd's table of the remainder file: the row named 'store' holds
// the database's identity (a random id written once, replicated with the data, so a failover
// keeps it); every other row is a consumed remainder file's token.
const mysqlCreateRemainder = "CREATE TABLE IF NOT EXISTS `leafd_remainder` (\n" +
	"  `token` varchar(64) NOT NULL COMMENT 'a consumed remainder file (hex token), or ''store'': the database identity',\n" +
	"  `value` varchar(64) NOT NULL DEFAULT '' COMMENT 'the identity (row ''store'')',\n" +
	"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`token`)\n" +
	") ENGINE=InnoDB"

const mysqlRemainderStoreRow = "store"

// StoreID returns the database's identity from leafd_remainder, creating the table (when
// table creation is on) and the identity row on first use.
func (s *MySQLStore) StoreID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.createTable {
		if _, err := s.db.ExecContext(ctx, mysqlCreateRemainder); err != nil {
			return "", s.wrap("create leafd_remainder", "", err)
		}
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	if _, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO leafd_remainder (token, value) VALUES (?, ?)",
		mysqlRemainderStoreRow, hex.EncodeToString(id[:])); err != nil {
		return "", s.wrap("store identity", "", err)
	}
	var v string
	err := s.db.QueryRowContext(ctx, "SELECT value FROM leafd_remainder WHERE token = ?", mysqlRemainderStoreRow).Scan(&v)
	if err != nil {
		return "", s.wrap("store identity", "", err)
	}
	if v == "" {
		return "", errors.New("segment: mysql leafd_remainder: empty store identity")
	}
	// The server's own identity too: a remainder is served only by the server it was saved
	// on. After a failover the consumption of a file may be lost with the transactions the new
	// primary missed, and a restored copy of the data dir would then replay it (duplicate
	// IDs); a failover instead costs the remainder (a gap).
	expr, err := s.identExpr(ctx)
	if err != nil {
		return "", s.wrap("server identity", "", err)
	}
	var server string
	if err := s.db.QueryRowContext(ctx, "SELECT CONCAT_WS(':', "+expr+")").Scan(&server); err != nil {
		return "", s.wrap("server identity", "", err)
	}
	return "mysql:" + v + ":" + server, nil
}

// ConsumeRemainder inserts token into leafd_remainder (autocommit: durable once it returns,
// with the database's own durability settings, docs/MYSQL.md); ErrRemainderUsed on a
// duplicate.
func (s *MySQLStore) ConsumeRemainder(ctx context.Context, token string) error {
	if token == mysqlRemainderStoreRow || token == "" {
		return fmt.Errorf("segment: invalid remainder token %q", token)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.db.ExecContext(ctx, "INSERT INTO leafd_remainder (token) VALUES (?)", token)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == mysqlErrDupEntry {
		return segment.ErrRemainderUsed
	}
	if err != nil {
		return s.wrap("consume remainder", "", err)
	}
	return nil
}
