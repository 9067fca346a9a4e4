package mysqlworker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain: every goroutine of a source (the renewals, the driver's) ends with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
