package volume

import (
	"fmt"
	"os"
	"testing"

	"github.com/leafd/leafd/internal/e2e"
)

// TestMain builds the leafd command of the parent directory with -race, as cmd/leafd's own
// TestMain does.
func TestMain(m *testing.M) {
	cleanup, err := e2e.Build("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// leafTableDDL is Leaf's own leaf_alloc table (as cmd/leafd's adopt tests create it).
const leafTableDDL = "CREATE TABLE `leaf_alloc` (`biz_tag` varchar(128) NOT NULL DEFAULT '', `max_id` bigint(20) NOT NULL DEFAULT '1'," +
	" `step` int(11) NOT NULL, `description` varchar(256) DEFAULT NULL," +
	" `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (`biz_tag`)) ENGINE=InnoDB"
