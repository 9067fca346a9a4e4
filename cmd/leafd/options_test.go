package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// TestCheckEnviron: a LEAFD_ variable that is no option refuses the start, naming the nearest
// option's variable; the options' variables, LEAFD_CONFIG, other programs' variables and the
// project's own test and script variables pass.
func TestCheckEnviron(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    string // "" : accepted
	}{
		{"options", []string{"LEAFD_MYSQL_DSN=x", "LEAFD_CONFIG=/c", "LEAFD_MAX_BATCH=3", "PATH=/bin"}, ""},
		{"tests and scripts", []string{"LEAFD_TEST_MYSQL_DSN=x", "LEAFD_BENCH_OUT=/o", "LEAFD_HOT_BENCH=1", "LEAFD_FLAGS=--x", "LEAFD_IMAGE=leafd:1"}, ""},
		{"misspelled dsn", []string{"LEAFD_MYSQL_DNS=leaf:pw@tcp(db:3306)/leaf"}, "unknown environment variable LEAFD_MYSQL_DNS (did you mean LEAFD_MYSQL_DSN?)"},
		{"misspelled addr", []string{"LEAFD_ADR=:1"}, "did you mean LEAFD_ADDR?"},
		{"no such option", []string{"LEAFD_VERSION=1"}, "unknown environment variable LEAFD_VERSION"},
		{"a value with =", []string{"LEAFD_ZK_ADRS=a=b"}, "did you mean LEAFD_ZK_ADDRS?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkEnviron(tc.environ)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestFlagValueMessage: a bad flag value is the sentence the environment gets (the option,
// the form it wants, its default), without the usage; an unknown flag names the nearest one.
func TestFlagValueMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"number", []string{"--maxclients", "many"}, fmt.Sprintf(`--maxclients "many": want a whole number (default %d)`, flagDefault[int]("maxclients"))},
		{"duration", []string{"--wait-timeout=3"}, `--wait-timeout "3": want a duration such as 500ms, 10s or 1m (default`},
		{"bool", []string{"--worker-reuse=maybe"}, `--worker-reuse "maybe": want true or false (default false)`},
		{"unknown", []string{"--mysql-dns", "x"}, "unknown flag --mysql-dns (did you mean --mysql-dsn?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, err := loadConfig(tc.args, func(string) string { return "" }, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if stderr.Len() != 0 {
				t.Errorf("printed %d bytes (the usage?), want nothing beside the error:\n%.300s", stderr.Len(), stderr.String())
			}
		})
	}
}

func flagDefault[T any](name string) T {
	var c Config
	return flagSet(&c).Lookup(name).Value.(interface{ Get() any }).Get().(T)
}

// TestBinaryRefusesMisconfiguration: the built binary refuses a misspelled LEAFD_ variable
// and a bad flag value with one short paragraph on stderr and exit status 2, before it
// touches the data dir.
func TestBinaryRefusesMisconfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"misspelled variable", []string{"LEAFD_MYSQL_DNS=leaf:pw@tcp(127.0.0.1:1)/leaf"}, nil, "LEAFD_MYSQL_DNS (did you mean LEAFD_MYSQL_DSN?)"},
		{"bad flag value", nil, []string{"--max-batch", "lots"}, `--max-batch "lots": want a whole number (default`},
		{"misspelled variable, adopt", []string{"LEAFD_MYSQL_DNS=x"}, []string{"adopt", "--dry-run"}, "did you mean LEAFD_MYSQL_DSN?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A start that is not refused is killed after 20 s (and fails the test).
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, e2e.Binary(), append(tc.args, "--data-dir", dir, "--addr", "127.0.0.1:0", "--http-addr", "")...)
			if tc.args != nil && tc.args[0] == "adopt" {
				cmd = exec.CommandContext(ctx, e2e.Binary(), tc.args...)
			}
			cmd.Env = append(cmd.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("got %v, want exit status 2:\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("got %q, want %q", out, tc.want)
			}
			if lines := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; lines > 2 {
				t.Errorf("got %d lines, want one paragraph:\n%s", lines, out)
			}
		})
	}
	if entries, _ := filepath.Glob(dir + "/*"); len(entries) != 0 {
		t.Errorf("data dir touched by refused starts: %v", entries)
	}
}
