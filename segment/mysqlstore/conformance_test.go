package mysqlstore

import (
	"path/filepath"
	"testing"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/segment/segtest"
)

// TestConformance runs the stores' conformance suite on MySQL (a fresh database per case;
// LEAFD_TEST_MYSQL_DSN, see internal/testenv), with the instance's marks in a marks file (as
// cmd/leafd opens them).
func TestConformance(t *testing.T) {
	segtest.Run(t, func(t *testing.T) (segment.Store, func() segtest.MarksFile) {
		dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
		st := openTestMySQL(t, dsn, nil)
		dir := t.TempDir()
		return st, func() segtest.MarksFile {
			mk, err := boltstore.OpenMarkFile(filepath.Join(dir, "marks.db"))
			if err != nil {
				t.Fatal(err)
			}
			return mk
		}
	})
}
