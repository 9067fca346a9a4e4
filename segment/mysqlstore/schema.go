package mysqlstore

// The MySQL store's tables: Leaf's leaf_alloc, unchanged, and leafd_fence, leafd's own.

import (
	"context"
	"errors"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
)

// mysqlCreateTable is Leaf's DDL, unchanged, so that a database created by leafd can be used
// by Leaf and the other way round.
const mysqlCreateTable = "CREATE TABLE IF NOT EXISTS `leaf_alloc` (\n" +
	"  `biz_tag` varchar(128) NOT NULL DEFAULT '',\n" +
	"  `max_id` bigint(20) NOT NULL DEFAULT '1',\n" +
	"  `step` int(11) NOT NULL,\n" +
	"  `description` varchar(256) DEFAULT NULL,\n" +
	"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

// ensureTable runs CREATE TABLE IF NOT EXISTS until it succeeds. A refusal by the server
// (e.g. no CREATE privilege on a database where the table exists) is logged and not retried
// until a call finds the table missing (see wrap); a connection failure is returned and
// retried on the next call.
func (s *MySQLStore) ensureTable(ctx context.Context) error {
	if s.tableReady.Load() {
		return nil
	}
	select {
	case s.tableSem <- struct{}{}:
		defer func() { <-s.tableSem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.tableReady.Load() {
		return nil
	}
	_, err := s.db.ExecContext(ctx, mysqlCreateTable)
	if err == nil && s.failoverAllocs > 0 {
		_, err = s.db.ExecContext(ctx, mysqlCreateFence)
		if err == nil {
			err = s.ensureMaxEnd(ctx)
		}
	}
	var me *mysql.MySQLError
	switch {
	case err == nil:
		s.tableReady.Store(true)
		return nil
	case errors.As(err, &me):
		s.tableReady.Store(true)
		s.log.Warn("cannot create table leaf_alloc or leafd_fence; using them as they are", zap.Error(err))
		return nil
	default:
		return err
	}
}

// mysqlCreateFence is leafd's own table; leaf_alloc stays exactly Leaf's.
const mysqlCreateFence = "CREATE TABLE IF NOT EXISTS `leafd_fence` (\n" +
	"  `biz_tag` varchar(128) NOT NULL,\n" +
	"  `server_id` bigint NOT NULL COMMENT '@@server_id of the primary that granted the last range',\n" +
	"  `server_uuid` varchar(64) NOT NULL DEFAULT '' COMMENT '@@server_uuid (MySQL; empty on MariaDB)',\n" +
	"  `epoch` bigint NOT NULL COMMENT 'grows by one at each takeover',\n" +
	"  `token` bigint NOT NULL COMMENT 'random, new at each takeover',\n" +
	"  `gap` bigint NOT NULL DEFAULT 0 COMMENT 'how far max_id was moved at the last takeover',\n" +
	"  `max_end` bigint NOT NULL DEFAULT 0 COMMENT 'high-water: highest range end ever granted for the tag; survives the deletion of its leaf_alloc row',\n" +
	"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

const mysqlErrDupFieldName = 1060 // ER_DUP_FIELDNAME: the column was added meanwhile

// mysqlAddMaxEnd upgrades a leafd_fence table created by an earlier leafd (no high-water
// column): existing rows read 0, and their first allocation sets it.
const mysqlAddMaxEnd = "ALTER TABLE `leafd_fence` ADD COLUMN `max_end` bigint NOT NULL DEFAULT 0" +
	" COMMENT 'high-water: highest range end ever granted for the tag; survives the deletion of its leaf_alloc row'"

// ensureMaxEnd adds the high-water column to a leafd_fence table that lacks it. It asks
// information_schema first (ADD COLUMN IF NOT EXISTS is MariaDB only) and takes a concurrent
// addition by another instance (duplicate column) as success.
func (s *MySQLStore) ensureMaxEnd(ctx context.Context) error {
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS"+
		" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafd_fence' AND COLUMN_NAME = 'max_end'").Scan(&n)
	if err != nil || n > 0 {
		return err
	}
	_, err = s.db.ExecContext(ctx, mysqlAddMaxEnd)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == mysqlErrDupFieldName {
		return nil
	}
	if err == nil {
		s.log.Info("segment: added the high-water column max_end to leafd_fence (upgrade)")
	}
	return err
}

// FenceTableDDL is the DDL of leafd_fence, for a tool that checks it may create the table
// (leafd adopt's grant check runs it: a no-op where the table exists).
func FenceTableDDL() string { return mysqlCreateFence }
