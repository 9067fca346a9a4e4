package mysqlstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// BenchmarkMySQLAllocate measures one allocation round trip (BEGIN, UPDATE max_id, SELECT,
// COMMIT, durably committed) on the server of LEAFD_TEST_MYSQL_DSN. With
// innodb_flush_log_at_trx_commit=1 it is bounded by the server's fsync; the baseline is a
// bare SELECT on the same pool (the network and driver share of it).
//
//	bash scripts/test.sh ./segment/ -run '^$' -bench MySQLAllocate -benchtime 2000x -count 5
func BenchmarkMySQLAllocate(b *testing.B) {
	dsn := testenv.FreshDatabase(b, testenv.MySQLDSN(b))
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	mc.InterpolateParams = true
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for _, bc := range []struct {
		name string
		dsn  string
	}{
		{"prepared", dsn + sep + "interpolateParams=false"}, // go-sql-driver's default
		{"interpolateParams", mc.FormatDSN()},               // leafd's default (driverConfig)
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := DefaultMySQLConfig()
			cfg.DSN = bc.dsn
			s, err := OpenMySQL(context.Background(), cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			if err := s.Create(ctx, segment.Tag{Name: "bench", MaxID: 1, Step: 1000}); err != nil && !errors.Is(err, segment.ErrTagExists) {
				b.Fatal(err)
			}
			b.Run("Allocate", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Allocate(ctx, "bench", 0); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("baseline-MaxID", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.MaxID(ctx, "bench"); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
