package main

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/handlers"
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

// TestSecretsFromFiles: the *-file options replace the secret with the file's one line; a
// secret given twice, an empty file or a second line is a configuration error.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	none := func(string) string { return "" }
	cfg, err := loadConfig([]string{"--requirepass-file", write("pass", "s3cret\n"),
		"--mysql-dsn-file", write("dsn", "u:p@tcp(db:3306)/leaf\n"), "--http-auth-file", write("tok", "tok\r\n")}, none, io.Discard)
	if err != nil || cfg.RequirePass != "s3cret" || cfg.MySQLDSN != "u:p@tcp(db:3306)/leaf" || cfg.HTTPAuth != "tok" {
		t.Errorf("got %q %q %q, %v", cfg.RequirePass, cfg.MySQLDSN, cfg.HTTPAuth, err)
	}
	if len(cfg.secretsOnCmdline) != 0 {
		t.Errorf("secrets on the command line: got %v, want none", cfg.secretsOnCmdline)
	}
	if cfg.httpToken() != "tok" {
		t.Errorf("httpToken: got %q, want the --http-auth token", cfg.httpToken())
	}
	cfg, _ = loadConfig(nil, func(k string) string {
		if k == "LEAFD_REQUIREPASS" {
			return "env-pass"
		}
		return ""
	}, io.Discard)
	if cfg.httpToken() != "env-pass" || len(cfg.secretsOnCmdline) != 0 {
		t.Errorf("LEAFD_REQUIREPASS: token %q, on the command line %v", cfg.httpToken(), cfg.secretsOnCmdline)
	}
	cfg, _ = loadConfig([]string{"--requirepass", "x"}, none, io.Discard)
	if len(cfg.secretsOnCmdline) != 1 {
		t.Errorf("--requirepass on the command line not noted: %v", cfg.secretsOnCmdline)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"twice", []string{"--requirepass", "x", "--requirepass-file", write("p2", "y\n")}, "exclude each other"},
		{"empty", []string{"--requirepass-file", write("empty", "\n")}, "one non-empty line"},
		{"two lines", []string{"--http-auth-file", write("two", "a\nb\n")}, "one non-empty line"},
		{"missing", []string{"--mysql-dsn-file", filepath.Join(dir, "nope")}, "--mysql-dsn-file"},
		{"http-tls without cert", []string{"--http-tls"}, "--http-tls"},
		{"max-args", []string{"--max-args", "2"}, "--max-args"},
		{"loop-spin negative", []string{"--loop-spin", "-1us"}, "--loop-spin"},
		{"loop-spin too long", []string{"--loop-spin", "2ms"}, "--loop-spin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := loadConfig(tc.args, none, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestReadmeDefaults: the default the options tables give each option (the README's short
// table and docs/REFERENCE.md's full one) is the one the flag set has (taken from the
// packages' DefaultConfig), so neither can drift alone.
func TestReadmeDefaults(t *testing.T) {
	var c Config
	fs := flagSet(&c)
	row := regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\| (`([^`]*)`|empty) \\|")
	for _, tc := range []struct {
		file string
		min  int
	}{{"../../README.md", 10}, {"../../docs/REFERENCE.md", 40}} {
		readme, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, line := range strings.Split(string(readme), "\n") {
			m := row.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			f := fs.Lookup(m[1])
			if f == nil {
				continue // documented elsewhere (--config)
			}
			want := m[3] // "" for "empty"
			if f.DefValue != want {
				t.Errorf("%s: --%s: says default %q, the flag has %q", tc.file, m[1], want, f.DefValue)
			}
			checked++
		}
		if checked < tc.min {
			t.Errorf("%s: checked %d defaults, want the options table (%d+)", tc.file, checked, tc.min)
		}
	}
	if got := fs.Lookup("max-batch").DefValue; got != strconv.Itoa(handlers.DefaultMaxBatch) {
		t.Errorf("--max-batch default %s, want handlers.DefaultMaxBatch %d", got, handlers.DefaultMaxBatch)
	}
}

// TestNoOutsideReferences: the repository stands alone: no file points at notes or a
// contract outside it (the contract and the measured hazards are docs/CONTRACT.md and
// docs/HAZARDS.md).
func TestNoOutsideReferences(t *testing.T) {
	t.Parallel()
	outside := regexp.MustCompile(`NOTES\.md|SPEC\.md|STYLE\.md|\.\./shared|/work/shared`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "config_test.go") { // this test names them
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if loc := outside.FindIndex(b); loc != nil && !bytes.Contains(b[:min(len(b), 8000)], []byte{0}) {
			line := bytes.Count(b[:loc[0]], []byte("\n")) + 1
			t.Errorf("%s:%d points outside the repository (%s): say it in docs/ instead", path, line, b[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
