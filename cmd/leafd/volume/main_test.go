package volume

import (
	"testing"

	"github.com/leafd/leafd/internal/e2e"
)

// TestMain builds the leafd command of the parent directory with -race, as cmd/leafd's own
// TestMain does.
func TestMain(m *testing.M) { e2e.Main(m, "..") }
