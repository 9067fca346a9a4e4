package segment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	bolt "go.etcd.io/bbolt"
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

var (
	boltRegionBucket = []byte("region")
	boltRegionKey    = []byte("layout")
)

// RegionStore is a store that records its region layout: *MySQLStore, *BoltStore.
type RegionStore interface {
	// Region returns the recorded layout; ok is false when none is recorded.
	Region(ctx context.Context) (r Region, ok bool, err error)
	// InitRegion records r when no layout is recorded and returns the recorded one.
	InitRegion(ctx context.Context, r Region) (Region, error)
	// SetRegion records r, replacing any record (the region procedures of docs/MYSQL.md).
	SetRegion(ctx context.Context, r Region) error
	Tags(ctx context.Context) ([]string, error)
}

var (
	_ RegionStore = (*MySQLStore)(nil)
	_ RegionStore = (*BoltStore)(nil)
)

func normRegion(r Region) Region {
	if r.Single() {
		return Region{0, 1}
	}
	return r
}

// CheckRegion refuses (ErrRegionMismatch) a start in region want on st when st records another
// layout, or when st records none but already has tags and want is not the single region (a
// single-region table joins regions by the adoption procedure, which sets every region's
// counters apart first). A store with neither a record nor tags is recorded as want.
func CheckRegion(ctx context.Context, st RegionStore, want Region) error {
	want = normRegion(want)
	had, ok, err := st.Region(ctx)
	if err != nil {
		return fmt.Errorf("segment: read the region record: %w", err)
	}
	if !ok {
		if want.Single() {
			return nil
		}
		tags, err := st.Tags(ctx)
		if err != nil {
			return fmt.Errorf("segment: region check: %w", err)
		}
		if len(tags) > 0 {
			return fmt.Errorf("%w: the store has %d tags and no region record (a single-region store); "+
				"its IDs would be issued again by other regions: join it to regions with `leafd region` first (docs/MYSQL.md, \"Regions\")",
				ErrRegionMismatch, len(tags))
		}
		if had, err = st.InitRegion(ctx, want); err != nil {
			return fmt.Errorf("segment: record the region: %w", err)
		}
	}
	if had = normRegion(had); had != want {
		return fmt.Errorf("%w: the store is recorded as region %s, this start has --region %s; "+
			"point each region at its own database, or change the layout by the procedure of docs/MYSQL.md, \"Regions\"",
			ErrRegionMismatch, had, want)
	}
	return nil
}

// Region implements RegionStore: the row of leafd_region (none when the table is missing).
func (s *MySQLStore) Region(ctx context.Context) (Region, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var r Region
	err := s.db.QueryRowContext(ctx, "SELECT region, regions FROM leafd_region WHERE id = 1").Scan(&r.K, &r.N)
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &me) && me.Number == mysqlErrNoSuchTable:
		return Region{}, false, nil
	case err != nil:
		return Region{}, false, s.wrap("region", "", err)
	}
	return r, true, nil
}

// InitRegion implements RegionStore: INSERT IGNORE, then read back (instances of a new region
// starting together record one layout).
func (s *MySQLStore) InitRegion(ctx context.Context, r Region) (Region, error) {
	if err := s.writeRegion(ctx, r, "INSERT IGNORE INTO leafd_region (id, region, regions) VALUES (1, ?, ?)"); err != nil {
		return Region{}, err
	}
	had, ok, err := s.Region(ctx)
	if err == nil && !ok {
		err = errors.New("segment: leafd_region has no row after its insert")
	}
	return had, err
}

// SetRegion implements RegionStore.
func (s *MySQLStore) SetRegion(ctx context.Context, r Region) error {
	return s.writeRegion(ctx, r, "INSERT INTO leafd_region (id, region, regions) VALUES (1, ?, ?) "+
		"ON DUPLICATE KEY UPDATE region = VALUES(region), regions = VALUES(regions)")
}

func (s *MySQLStore) writeRegion(ctx context.Context, r Region, q string) error {
	r = normRegion(r)
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

// Region implements RegionStore.
func (s *BoltStore) Region(ctx context.Context) (Region, bool, error) {
	var (
		r  Region
		ok bool
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltRegionBucket)
		if b == nil {
			return nil
		}
		v := b.Get(boltRegionKey)
		if v == nil {
			return nil
		}
		var err error
		r, err = ParseRegion(string(v))
		ok = err == nil
		return err
	})
	if err != nil {
		return Region{}, false, boltWrap("region", err)
	}
	return r, ok, nil
}

// InitRegion implements RegionStore.
func (s *BoltStore) InitRegion(ctx context.Context, r Region) (Region, error) {
	r = normRegion(r)
	had := r
	err := s.update(ctx, func(tx *bolt.Tx) error {
		if b := tx.Bucket(boltRegionBucket); b != nil {
			if v := b.Get(boltRegionKey); v != nil {
				var err error
				had, err = ParseRegion(string(v))
				return err
			}
		}
		b, err := tx.CreateBucketIfNotExists(boltRegionBucket)
		if err != nil {
			return err
		}
		return b.Put(boltRegionKey, []byte(r.String()))
	})
	if err != nil {
		return Region{}, boltWrap("record region", err)
	}
	return had, nil
}

// SetRegion implements RegionStore.
func (s *BoltStore) SetRegion(ctx context.Context, r Region) error {
	r = normRegion(r)
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(boltRegionBucket)
		if err != nil {
			return err
		}
		return b.Put(boltRegionKey, []byte(r.String()))
	})
	if err != nil {
		return boltWrap("record region", err)
	}
	return nil
}
