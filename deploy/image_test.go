package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// podman runs podman with runc (Debian's default crun refuses this machine's cgroups).
type podman struct {
	t   *testing.T
	bin string
}

func (p podman) run(timeout time.Duration, args ...string) (string, error) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bin, append([]string{"--runtime", "runc"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, lastLines(errb.String(), 10))
	}
	return strings.TrimSpace(out.String()), nil
}

func (p podman) must(timeout time.Duration, args ...string) string {
	p.t.Helper()
	out, err := p.run(timeout, args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

func randName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// TestImage builds the image of deploy/image/Dockerfile with scripts/image.sh and podman, and runs it
// as an operator would: on a named volume, as non-root, answering INCR and /readyz, healthy by
// its own HEALTHCHECK, keeping its IDs across a new container on the same volume, and exiting
// 0 on podman stop (SIGTERM) well within the grace period.
func TestImage(t *testing.T) {
	p := podman{t: t, bin: testenv.Tool(t, "podman", "podman")}
	testenv.Tool(t, "runc", "runc")
	if testing.Short() {
		t.Skip("builds and runs a container image")
	}
	tag := randName("localhost/leafd-test:t")
	vol := randName("leafd-test-")
	ctxDir := t.TempDir()
	var containers []string
	t.Cleanup(func() {
		for _, c := range containers {
			_, _ = p.run(time.Minute, "rm", "-f", "-t", "0", c)
		}
		_, _ = p.run(time.Minute, "volume", "rm", "-f", vol)
		_, _ = p.run(time.Minute, "rmi", "-f", tag)
	})

	build := exec.Command("bash", "../scripts/image.sh", tag)
	build.Env = append(os.Environ(), "LEAFD_IMAGE_TOOL="+p.bin+" --runtime runc", "LEAFD_IMAGE_CONTEXT="+ctxDir)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, lastLines(string(out), 30))
	}
	// The binary in the image is static: no ELF interpreter, so scratch can run it.
	f, err := elf.Open(filepath.Join(ctxDir, "leafd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("leafd in the image is dynamically linked (has PT_INTERP)")
		}
	}
	_ = f.Close()
	cfg := p.must(time.Minute, "image", "inspect", "--format",
		"{{.Config.User}}|{{json .Config.ExposedPorts}}|{{json .Config.Volumes}}|{{json .Config.Healthcheck}}", tag)
	for _, want := range []string{"65532:65532|", `"8080/tcp"`, `"6380/tcp"`, `"/data"`, `"/leafd","health"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("image config %s: missing %s", cfg, want)
		}
	}
	p.must(time.Minute, "volume", "create", vol)

	// start runs a container on the volume with host networking, both ports on loopback only.
	start := func() (name string, rc *redis.Client, admin string) {
		t.Helper()
		name = randName("leafd-test-")
		containers = append(containers, name)
		respAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
		admin = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
		p.must(2*time.Minute, "run", "-d", "--name", name, "--network", "host",
			// This machine refuses podman's default rlimits; the health timer needs systemd
			// (podman healthcheck run below runs the check by hand).
			"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096", "--health-interval", "disable",
			"-v", vol+":/data", "-e", "LEAFD_ADDR="+respAddr, "-e", "LEAFD_HTTP_ADDR="+admin, tag)
		deadline := time.Now().Add(60 * time.Second)
		for {
			// /healthz, not /readyz: this waits for the process to be live; readiness is
			// checked on its own, after the INCRs below (ready).
			resp, err := http.Get("http://" + admin + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				logs, _ := p.run(time.Minute, "logs", name)
				t.Fatalf("container %s: /healthz not 200 within 60s (last: %v)\n%s", name, err, lastLines(logs, 20))
			}
			time.Sleep(100 * time.Millisecond)
		}
		rc = redis.NewClient(&redis.Options{Addr: respAddr, MaxRetries: -1})
		t.Cleanup(func() { _ = rc.Close() })
		return name, rc, admin
	}
	ready := func(admin string) {
		t.Helper()
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s/readyz: got %d, want 200", admin, resp.StatusCode)
		}
	}
	// stop sends SIGTERM with a 30 s grace period and checks a clean, prompt exit.
	const grace = 30 * time.Second
	stop := func(name string) {
		t.Helper()
		began := time.Now()
		p.must(2*grace, "stop", "-t", strconv.Itoa(int(grace/time.Second)), name)
		took := time.Since(began)
		code := p.must(time.Minute, "inspect", "--format", "{{.State.ExitCode}}", name)
		if code != "0" || took >= grace {
			t.Errorf("podman stop %s: exit code %s after %v, want 0 within the %v grace period", name, code, took, grace)
		}
	}
	ctx := context.Background()

	name, rc, admin := start()
	var last int64
	for i := range 3 {
		v, err := rc.Incr(ctx, "orders").Result()
		if err != nil || v <= last {
			t.Fatalf("INCR #%d: got %d, %v; want more than %d", i, v, err, last)
		}
		last = v
	}
	snow1, err := rc.Do(ctx, "IDS.SNOWFLAKE").Int64()
	if err != nil || snow1 <= 0 {
		t.Fatalf("IDS.SNOWFLAKE: got %d, %v", snow1, err)
	}
	ready(admin)
	// Non-root: the container's main process, seen from the host.
	pid := p.must(time.Minute, "inspect", "--format", "{{.State.Pid}}", name)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Uid:") || strings.HasPrefix(line, "Gid:") {
			if f := strings.Fields(line); len(f) < 2 || f[1] != "65532" || f[2] != "65532" {
				t.Errorf("container process runs as %q, want 65532 (non-root)", line)
			}
		}
	}
	// The image's HEALTHCHECK (leafd health) passes.
	if out, err := p.run(time.Minute, "healthcheck", "run", name); err != nil {
		t.Errorf("podman healthcheck run: %v %s", err, out)
	}
	stop(name)

	// A new container on the same volume continues above every ID handed out.
	name2, rc2, admin2 := start()
	v, err := rc2.Incr(ctx, "orders").Result()
	if err != nil || v <= last {
		t.Errorf("INCR after restart on the same volume: got %d, %v; want more than %d", v, err, last)
	}
	snow2, err := rc2.Do(ctx, "IDS.SNOWFLAKE").Int64()
	if err != nil || snow2 <= snow1 {
		t.Errorf("IDS.SNOWFLAKE after restart: got %d, %v; want more than %d", snow2, err, snow1)
	}
	ready(admin2)
	stop(name2)
}
