package main

import (
	"context"
	"io"
	"path/filepath"

	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/segment/mysqlstore"
	"go.uber.org/zap"
)

// openMySQL opens the MySQL store and, beside it in the data dir, the file of regression
// marks (the highest range end this instance was ever granted per tag). It does not fail
// when the database is down: the instance starts and answers UNAVAILABLE until it is back.
func openMySQL(ctx context.Context, cfg Config, log *zap.Logger) (segment.Store, segment.Marks, string, []io.Closer, error) {
	marks, err := boltstore.OpenMarkFile(filepath.Join(cfg.DataDir, "marks.db"))
	if err != nil {
		return nil, nil, "", nil, err
	}
	mcfg := mysqlstore.DefaultMySQLConfig()
	mcfg.DSN = cfg.MySQLDSN
	mcfg.MaxOpenConns = cfg.MySQLMaxConns
	mcfg.MaxIdleConns = cfg.MySQLMaxConns
	mcfg.ConnMaxLifetime = cfg.MySQLLifetime
	mcfg.QueryTimeout = cfg.LoadTimeout
	mcfg.CreateTable = cfg.MySQLCreate
	mcfg.FailoverAllocs = cfg.MySQLFailover
	mcfg.MaxStep = cfg.MaxStep
	mcfg.RequireSemiSync = cfg.MySQLSemiSync
	mcfg.Now = periodClock(cfg.PeriodClockOffset) // takeover instants are compared with periods
	// What this data dir saw of a Galera cluster: a restart of it from a member that lacked
	// commits is a failover to every store, after a restart of this instance too.
	hist, err := mysqlcluster.OpenHistory(filepath.Join(cfg.DataDir, mysqlcluster.HistoryFile), log.Named("mysqlcluster"))
	if err != nil {
		_ = marks.Close()
		return nil, nil, "", nil, err
	}
	mcfg.Cluster = hist
	st, err := mysqlstore.OpenMySQL(ctx, mcfg, log.Named("mysql"))
	if err != nil {
		_ = marks.Close()
		return nil, nil, "", nil, err
	}
	return st, marks, "mysql", []io.Closer{marks, st, hist}, nil
}
