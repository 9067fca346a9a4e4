package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/leafd/leafd/internal/e2e"
)

// TestVersionFlag: --version (alone or after other flags) is loadConfig's errShowVersion, not
// "flag provided but not defined"; it is no LEAFD_VERSION variable nor config-file option.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"--log-level", "warn", "--version"}} {
		if _, err := loadConfig(args, func(string) string { return "" }, io.Discard); !errors.Is(err, errShowVersion) {
			t.Errorf("loadConfig(%q): got %v, want errShowVersion", args, err)
		}
	}
	env := func(k string) string {
		if k == "LEAFD_VERSION" {
			return "true"
		}
		return ""
	}
	if _, err := loadConfig(nil, env, io.Discard); err != nil {
		t.Errorf("LEAFD_VERSION=true: got %v, want it ignored (a build's version is no option)", err)
	}
}

// TestHelpListsSubcommands: --help names every subcommand (health, raise-max-id, adopt,
// version) above the flags.
func TestHelpListsSubcommands(t *testing.T) {
	var out bytes.Buffer
	if _, err := loadConfig([]string{"--help"}, func(string) string { return "" }, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: got %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"leafd health", "leafd raise-max-id", "leafd adopt", "leafd version", "-max-batch"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %q:\n%s", want, out.String())
		}
	}
	// The flag package asks a zero value of every flag's type for its String.
	if strings.Contains(out.String(), "panic") {
		t.Errorf("--help printed a panic:\n%s", e2e.Tail(out.String(), 5))
	}
}

// TestVersionStamped builds leafd as the Makefile does (-X main.version=...) and checks that
// `leafd version`, `leafd --version`, INFO server (leafd_version) and /status.json report the
// stamped version.
func TestVersionStamped(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a binary")
	}
	const stamp = "v9.8.7-test-g1234abc"
	bin := filepath.Join(t.TempDir(), "leafd")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+stamp, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}, {"--addr", "127.0.0.1:1", "--version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "leafd "+stamp {
			t.Errorf("leafd %s: got %q, %v; want \"leafd %s\"", strings.Join(args, " "), out, err, stamp)
		}
	}
	l := e2e.StartAs(t, &e2e.Leafd{Bin: bin})
	info, err := l.Do("INFO", "server")
	if s, _ := info.(string); err != nil || !strings.Contains(s, "leafd_version:"+stamp+"\r\n") {
		t.Errorf("INFO server: got %q, %v; want leafd_version:%s", info, err, stamp)
	}
	status, body, err := l.HTTPGet("/status.json", "")
	var rep struct{ Version string }
	if err != nil || status != 200 || json.Unmarshal([]byte(body), &rep) != nil || rep.Version != stamp {
		t.Errorf("/status.json: got %d %q, %v; want version %s", status, body, err, stamp)
	}
}

// TestConfigValueErrors: a value from the environment or the config file that does not parse
// says what is expected and names the flag (the flag package says only "parse error").
func TestConfigValueErrors(t *testing.T) {
	for name, tc := range map[string]struct{ env, want string }{
		"int":      {"LEAFD_MAX_BATCH", `LEAFD_MAX_BATCH="abc": want a whole number (default 1000) (--max-batch)`},
		"duration": {"LEAFD_TIMEOUT", `LEAFD_TIMEOUT="abc": want a duration such as 500ms, 10s or 1m`},
		"bool":     {"LEAFD_WORKER_REUSE", `LEAFD_WORKER_REUSE="abc": want true or false (default false) (--worker-reuse)`},
		"float":    {"LEAFD_PRELOAD_RATIO", `LEAFD_PRELOAD_RATIO="abc": want a decimal number`},
	} {
		env := func(k string) string {
			if k == tc.env {
				return "abc"
			}
			return ""
		}
		_, err := loadConfig(nil, env, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
}

// TestBuildInfoVersion: an unstamped build reports the module version of go install
// ...@vX.Y.Z, else the VCS revision (+dirty with uncommitted changes), never "dev".
func TestBuildInfoVersion(t *testing.T) {
	rev := "778d475347540535384fb7921ca975a628552125"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"go install @v0.1.0", &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, "v0.1.0"},
		{"go build on a tag", &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}, Settings: vcs("false")}, "v0.1.0"},
		{"go build in a clone", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201222047-778d47534754"}, Settings: vcs("false")}, "778d47534754"},
		{"go build, changes", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201222047-778d47534754+dirty"}, Settings: vcs("true")}, "778d47534754+dirty"},
		{"devel with vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")}, "778d47534754+dirty"},
		{"pseudo-version only", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201222047-778d47534754"}}, "v0.0.0-20261201222047-778d47534754"},
		{"nothing", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "unknown"},
		{"no build info", nil, "unknown"},
	} {
		if got := buildInfoVersion(tc.info); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestVersionUnstamped: `go build ./cmd/leafd && ./leafd --version` in a clone prints the
// commit's revision, and +dirty once a tracked file changed. The build runs in a fresh clone
// of HEAD (Go reads VCS information only where .git is a directory, not in a git worktree),
// with -buildvcs=true whatever GOFLAGS the machine sets.
func TestVersionUnstamped(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("clones the repository and builds a binary")
	}
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	clone := filepath.Join(t.TempDir(), "leafd")
	if out, err := exec.Command("git", "clone", "-q", "--no-hardlinks", strings.TrimSpace(string(root)), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	head, err := exec.Command("git", "-C", clone, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	build := func() string {
		t.Helper()
		cmd := exec.Command("go", "build", "-trimpath", "./cmd/leafd")
		cmd.Dir = clone
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		out, err := exec.Command(filepath.Join(clone, "leafd"), "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("leafd --version: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	want := "leafd " + string(head[:12])
	if got := build(); got != want {
		t.Errorf("clean clone: got %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(clone, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := build(); got != want+"+dirty" {
		t.Errorf("changed clone: got %q, want %q", got, want+"+dirty")
	}
}
