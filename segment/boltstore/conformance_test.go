package boltstore

import (
	"path/filepath"
	"testing"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/segtest"
)

// TestConformance runs the stores' conformance suite on the embedded store, with its marks in
// marks.db beside it (as cmd/leafd opens them).
func TestConformance(t *testing.T) {
	segtest.Run(t, func(t *testing.T) (segment.Store, func() segtest.MarksFile) {
		dir := t.TempDir()
		st := openTestBolt(t, filepath.Join(dir, "leafd.db"))
		return st, func() segtest.MarksFile {
			mk, err := OpenMarkFile(filepath.Join(dir, "marks.db"))
			if err != nil {
				t.Fatal(err)
			}
			return mk
		}
	})
}
