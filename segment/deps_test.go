package segment

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoStoreDeps: the segment core links no database driver, no database/sql and no bbolt;
// the stores live in their own packages (segment/mysqlstore, segment/boltstore).
func TestNoStoreDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/leafd/leafd/segment").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "database/sql") || strings.Contains(dep, "bbolt") || strings.Contains(dep, "go-sql-driver") {
			t.Errorf("segment depends on %s", dep)
		}
	}
}
