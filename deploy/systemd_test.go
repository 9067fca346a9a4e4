package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leafd/leafd/internal/testenv"
)

// TestSystemdUnit: deploy/systemd/leafd.service passes systemd-analyze verify (with its
// ExecStart pointed at a leafd built from this tree), runs as a non-root user with a state
// directory as the data dir, stops within its timeout after SIGTERM, sets only LEAFD_*
// variables that are leafd flags, and fits --maxclients to GOMEMLIMIT under MemoryMax.
func TestSystemdUnit(t *testing.T) {
	analyze := testenv.Tool(t, "systemd-analyze", "systemd")
	b, err := os.ReadFile("systemd/leafd.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	kv := map[string]string{}
	envs := map[string]string{}
	for _, line := range strings.Split(unit, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		kv[k] = v
		if k == "Environment" {
			for _, f := range strings.Fields(v) {
				n, val, _ := strings.Cut(f, "=")
				envs[n] = val
			}
		}
	}
	for k, want := range map[string]string{"User": "leafd", "StateDirectory": "leafd", "KillSignal": "SIGTERM", "Restart": "on-failure", "NoNewPrivileges": "true"} {
		if kv[k] != want {
			t.Errorf("leafd.service: %s=%q, want %q", k, kv[k], want)
		}
	}
	if envs["LEAFD_DATA_DIR"] != "/var/lib/"+kv["StateDirectory"] {
		t.Errorf("leafd.service: LEAFD_DATA_DIR %q is not the StateDirectory (the time bound and marks must persist)", envs["LEAFD_DATA_DIR"])
	}
	if s, _ := strconv.Atoi(strings.TrimSuffix(kv["TimeoutStopSec"], "s")); s <= 10 {
		t.Errorf("leafd.service: TimeoutStopSec %q, want more than --shutdown-timeout (10s)", kv["TimeoutStopSec"])
	}
	flags := leafdFlags(t)
	for n := range envs {
		if f := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(n, "LEAFD_")), "_", "-"); strings.HasPrefix(n, "LEAFD_") && !flags[f] {
			t.Errorf("leafd.service: %s: leafd has no flag --%s", n, f)
		}
	}
	checkMemoryBudget(t, "leafd.service", envs, mib(t, kv["MemoryMax"]))

	// systemd-analyze verify needs ExecStart to exist: point it at a built leafd.
	dir := t.TempDir()
	bin := filepath.Join(dir, "leafd")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/leafd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if !strings.Contains(unit, "ExecStart=/usr/local/bin/leafd\n") {
		t.Fatal("leafd.service: ExecStart is not /usr/local/bin/leafd")
	}
	p := filepath.Join(dir, "leafd.service")
	if err := os.WriteFile(p, []byte(strings.Replace(unit, "ExecStart=/usr/local/bin/leafd", "ExecStart="+bin, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", p).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify leafd.service: %v\n%s", err, out)
	}
}
