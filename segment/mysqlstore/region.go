package mysqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/segment"
)

// The region record: the layout (region k of n) a store's counters are issued in. MySQL keeps
// it in the one-row table leafd_region, the embedded store in its "region" bucket. A store
// without a record is a single-region store; it stays without one as long as only
// single-region instances use it (an existing Leaf table is not touched).

const mysqlCreateRegion = "CREATE TABLE IF NOT EXISTS `leafd_region` (\n" +
	"  `id` tinyint NOT NULL,\n" +
	"  `region` int NOT NULL,\n" +
	"  `regions` int NOT NULL,\n" +
	"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`id`)\n" +
	") ENGINE=InnoDB"

// Region implements RegionStore: the row of leafd_region (none when the table is missing).
func (s *MySQLStore) Region(ctx context.Context) (segment.Region, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var r segment.Region
	err := s.db.QueryRowContext(ctx, "SELECT region, regions FROM leafd_region WHERE id = 1").Scan(&r.K, &r.N)
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &me) && me.Number == mysqlErrNoSuchTable:
		return segment.Region{}, false, nil
	case err != nil:
		return segment.Region{}, false, s.wrap("region", "", err)
	}
	return r, true, nil
}

// InitRegion implements RegionStore: INSERT IGNORE, then read back (instances of a new region
// starting together record one layout).
func (s *MySQLStore) InitRegion(ctx context.Context, r segment.Region) (segment.Region, error) {
	if err := s.writeRegion(ctx, r, "INSERT IGNORE INTO leafd_region (id, region, regions) VALUES (1, ?, ?)"); err != nil {
		return segment.Region{}, err
	}
	had, ok, err := s.Region(ctx)
	if err == nil && !ok {
		err = errors.New("segment: leafd_region has no row after its insert")
	}
	return had, err
}

// SetRegion implements RegionStore.
func (s *MySQLStore) SetRegion(ctx context.Context, r segment.Region) error {
	return s.writeRegion(ctx, r, "INSERT INTO leafd_region (id, region, regions) VALUES (1, ?, ?) "+
		"ON DUPLICATE KEY UPDATE region = VALUES(region), regions = VALUES(regions)")
}

func (s *MySQLStore) writeRegion(ctx context.Context, r segment.Region, q string) error {
	r = segment.Region.Normal(r)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, mysqlCreateRegion); err != nil {
		return s.wrap("create leafd_region", "", err)
	}
	if _, err := s.db.ExecContext(ctx, q, r.K, r.N); err != nil {
		return s.wrap("record region", "", err)
	}
	return nil
}

var _ segment.RegionStore = (*MySQLStore)(nil)
