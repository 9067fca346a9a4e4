package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// CopyDir copies the regular files of src into dst, as cp -a of a data dir would: the lock
// file comes along, the flock does not. An error fails the test.
func CopyDir(t testing.TB, src, dst string) {
	t.Helper()
	es, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
