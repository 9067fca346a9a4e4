package deploy_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/leafd/leafd/internal/testenv"
)

// TestAlertRules: promtool accepts the rules and their unit tests pass (each alert fires on
// the input that should fire it and stays quiet on the look-alikes).
func TestAlertRules(t *testing.T) {
	promtool := testenv.Tool(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "leafd-rules.yml"},
		{"test", "rules", "leafd-rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
