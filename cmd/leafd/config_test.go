package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigFileValues: a value may contain '=' (a DSN's parameters) in both line forms.
func TestConfigFileValues(t *testing.T) {
	const dsn = "leaf:pw@tcp(db:3306)/leaf?parseTime=true&timeout=2s"
	for _, tc := range []struct {
		name string
		line string
	}{
		{"space", "mysql-dsn " + dsn},
		{"equals", "mysql-dsn = " + dsn},
		{"equals no spaces", "mysql-dsn=" + dsn},
		{"quoted", `mysql-dsn "` + dsn + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "leafd.conf")
			if err := os.WriteFile(file, []byte(tc.line+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadConfig([]string{"--config", file}, func(string) string { return "" }, io.Discard)
			if err != nil || cfg.MySQLDSN != dsn {
				t.Errorf("got %q, %v; want %q", cfg.MySQLDSN, err, dsn)
			}
		})
	}
}

// TestConfigValidation: values that cannot work are configuration errors (exit 2) naming the
// options, found before any store is opened.
func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bulk above query buffer", []string{"--max-bulk", "8000000"}, "--max-query-buffer"},
		{"negative timeout", []string{"--timeout", "-5s"}, "--timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(tc.args, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
	cfg, err := loadConfig([]string{"--timeout", "0", "--max-bulk", "8000000", "--max-query-buffer", "9000000"}, func(string) string { return "" }, io.Discard)
	if err != nil || cfg.IdleTimeout != 0*time.Second {
		t.Errorf("--timeout 0 with a large bulk and buffer: got %v, %v; want accepted", cfg.IdleTimeout, err)
	}
}
