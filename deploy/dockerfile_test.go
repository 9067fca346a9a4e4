package deploy_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
)

// dockerfile reads a Dockerfile as its instructions, continuation lines joined and comments
// dropped.
func dockerfile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	cur := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	return out
}

// fromUser is the instructions from the last USER on: how the image runs.
func fromUser(t *testing.T, path string, ins []string) []string {
	t.Helper()
	for i := len(ins) - 1; i >= 0; i-- {
		if strings.HasPrefix(ins[i], "USER ") {
			return ins[i:]
		}
	}
	t.Fatalf("%s: no USER instruction", path)
	return nil
}

// TestDockerfilesAgree: the root Dockerfile (docker build . from a clone; not built here: its
// golang stage needs a registry) is the twin of deploy/image/Dockerfile, which TestImage
// builds and runs: the same instructions from USER on (user, ports, environment, volume,
// health check, entry point), a multi-stage build of a static binary onto scratch, every file
// it copies from the context present in a clone (tracked by git) and not excluded by
// .dockerignore, and everything deploy/image/Dockerfile copies staged by scripts/image.sh.
func TestDockerfilesAgree(t *testing.T) {
	root := dockerfile(t, "../Dockerfile")
	tested := dockerfile(t, "image/Dockerfile")
	a, b := fromUser(t, "Dockerfile", root), fromUser(t, "image/Dockerfile", tested)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("Dockerfile and deploy/image/Dockerfile differ from USER on:\n%s\n---\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	if a[0] != "USER 65532:65532" {
		t.Errorf("Dockerfile: %s, want the non-root USER 65532:65532", a[0])
	}
	var froms []string
	for _, in := range root {
		if strings.HasPrefix(in, "FROM ") {
			froms = append(froms, in)
		}
	}
	if len(froms) != 2 || !strings.HasPrefix(froms[0], "FROM docker.io/library/golang:") || !strings.HasSuffix(froms[0], " AS build") || froms[1] != "FROM scratch" {
		t.Errorf("Dockerfile: stages %q, want FROM docker.io/library/golang:... AS build (fully qualified: podman has no short-name default), then FROM scratch", froms)
	}
	joined := strings.Join(root, "\n")
	for _, want := range []string{"CGO_ENABLED=0 go build", "-X main.version=${VERSION}", "./cmd/leafd", "ARG VERSION="} {
		if !strings.Contains(joined, want) {
			t.Errorf("Dockerfile: no %q (static, version-stamped leafd)", want)
		}
	}

	// The sources of COPY without --from must be in a clone and in the build context.
	tracked := map[string]bool{}
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		tracked[f] = true
		for d := filepath.Dir(f); d != "."; d = filepath.Dir(d) {
			tracked[d] = true
		}
	}
	ignoreB, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	ignored := func(p string) bool {
		for _, pat := range strings.Fields(string(ignoreB)) {
			if ok, _ := filepath.Match(pat, p); ok || strings.HasPrefix(p, pat+"/") {
				return true
			}
		}
		return false
	}
	for _, in := range root {
		f := strings.Fields(in)
		if f[0] != "COPY" || strings.Contains(in, "--from=") {
			continue
		}
		for _, src := range f[1 : len(f)-1] {
			if strings.HasPrefix(src, "--") || src == "." {
				continue
			}
			if !tracked[src] || ignored(src) {
				t.Errorf("Dockerfile: COPY source %s is not in a clone's build context (tracked %v, ignored %v)", src, tracked[src], ignored(src))
			}
		}
	}
	for _, must := range []string{"go.mod", "go.sum", "cmd/leafd", "deploy/image/passwd", "deploy/image/group"} {
		if ignored(must) {
			t.Errorf(".dockerignore excludes %s, which the root Dockerfile needs", must)
		}
	}

	// deploy/image/Dockerfile copies what scripts/image.sh stages.
	script, err := os.ReadFile("../scripts/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range tested {
		f := strings.Fields(in)
		if f[0] != "COPY" {
			continue
		}
		for _, src := range f[1 : len(f)-1] {
			if strings.HasPrefix(src, "--") {
				continue
			}
			if !strings.Contains(string(script), `"$ctx/`+src) && !strings.Contains(string(script), "deploy/image/"+src) {
				t.Errorf("deploy/image/Dockerfile: COPY %s, which scripts/image.sh does not stage", src)
			}
		}
	}
}

// TestRootDockerfileBuilds: `podman build .` of the root Dockerfile gets as far as pulling its
// fully qualified base image (no registry is reachable here, so the pull itself may fail; a
// short name would stop earlier, on short-name resolution), or past it when the base is
// already present. The build is stopped as soon as either shows.
func TestRootDockerfileBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs podman build")
	}
	bin := testenv.Tool(t, "podman", "podman")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--runtime", "runc", "build", "--pull=missing", "-t", randName("leafd-root-"), "..")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	reached := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if strings.Contains(line, "Trying to pull docker.io/library/golang:") || strings.Contains(line, "STEP 2/") {
			reached = true
			cancel()
			break
		}
	}
	cancel()
	_ = cmd.Wait()
	if !reached {
		t.Errorf("podman build . did not reach the pull of docker.io/library/golang:\n%s", lastLines(strings.Join(lines, "\n"), 15))
	}
}
