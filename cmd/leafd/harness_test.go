package main

// The end-to-end harness: the tests of this package build the real leafd binary once and
// drive processes of it with redis-cli, redis-benchmark and go-redis.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// leafdBin is the binary built by TestMain.
var leafdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leafd-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leafdBin = filepath.Join(dir, "leafd")
	build := exec.Command("go", "build", "-race", "-o", leafdBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building leafd:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// leafd is one leafd process under test.
type leafd struct {
	t        testing.TB
	args     []string
	dataDir  string
	addr     string
	httpAddr string   // admin HTTP address; empty when the args disabled it
	bin      string   // the binary; leafdBin when empty
	prefix   []string // a command that runs the binary (prlimit ...)
	cmd      *exec.Cmd
	logMu    sync.Mutex
	log      bytes.Buffer
	exited   chan struct{}
	exitErr  error
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startLeafd starts leafd with its own data dir (unless args name one) and free RESP and
// admin ports (unless args name them), and waits until it answers PING. It is killed at
// cleanup.
func startLeafd(t testing.TB, args ...string) *leafd {
	t.Helper()
	return startLeafdAs(t, &leafd{}, args...)
}

// startLeafdAs is startLeafd for a process whose bin or prefix l sets.
func startLeafdAs(t testing.TB, l *leafd, args ...string) *leafd {
	t.Helper()
	l.t, l.args = t, args
	if !hasFlag(args, "--data-dir") {
		l.dataDir = t.TempDir()
		l.args = append(l.args, "--data-dir", l.dataDir)
	}
	if !hasFlag(args, "--addr") {
		l.addr = freeAddr(t)
		l.args = append(l.args, "--addr", l.addr)
	} else {
		l.addr = flagValue(args, "--addr")
	}
	// A free admin port too: the default 127.0.0.1:8080 would collide between instances.
	if !hasArg(args, "--http-addr") {
		l.httpAddr = freeAddr(t)
		l.args = append(l.args, "--http-addr", l.httpAddr)
	} else {
		l.httpAddr = flagValue(args, "--http-addr")
	}
	l.start()
	t.Cleanup(func() { l.kill() })
	return l
}

func hasFlag(args []string, name string) bool { return flagValue(args, name) != "" }

// hasArg reports whether args name the flag at all, even with an empty value.
func hasArg(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// start (re)starts the process with the same arguments and waits for PING.
func (l *leafd) start() {
	l.t.Helper()
	bin := leafdBin
	if l.bin != "" {
		bin = l.bin
	}
	argv := append(append(append([]string{}, l.prefix...), bin), l.args...)
	l.cmd = exec.Command(argv[0], argv[1:]...)
	l.cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	pr, pw, err := os.Pipe()
	if err != nil {
		l.t.Fatal(err)
	}
	l.cmd.Stdout, l.cmd.Stderr = pw, pw
	if err := l.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	pw.Close()
	l.exited = make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			l.logMu.Lock()
			l.log.Write(sc.Bytes())
			l.log.WriteByte('\n')
			l.logMu.Unlock()
		}
	}()
	cmd := l.cmd
	go func() { l.exitErr = cmd.Wait(); close(l.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", l.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-l.exited:
			l.t.Fatalf("leafd exited at start: %v\n%s", l.exitErr, l.Log())
		default:
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("leafd did not listen on %s within 30s\n%s", l.addr, l.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log returns what the process printed so far.
func (l *leafd) Log() string {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	return l.log.String()
}

// kill sends SIGKILL and waits for the exit.
func (l *leafd) kill() {
	if l.cmd == nil || l.cmd.Process == nil {
		return
	}
	select {
	case <-l.exited:
		return
	default:
	}
	_ = l.cmd.Process.Kill()
	<-l.exited
}

// stop sends SIGTERM and waits for a graceful exit, returning the exit error.
func (l *leafd) stop(timeout time.Duration) error {
	l.t.Helper()
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.exited:
		return l.exitErr
	case <-time.After(timeout):
		l.kill()
		return fmt.Errorf("leafd did not exit within %v after SIGTERM", timeout)
	}
}

// client returns a go-redis client for the process (RESP3 unless proto says otherwise).
func (l *leafd) client(proto int) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: l.addr, Protocol: proto, DisableIdentity: false,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 64,
		MaxRetries: -1,
	})
	l.t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisCLI runs redis-cli against the process and returns its output.
func (l *leafd) redisCLI(args ...string) (string, error) {
	l.t.Helper()
	host, port, _ := net.SplitHostPort(l.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// needTool fails (in CI) or skips when a command-line tool is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		msg := fmt.Sprintf("%s not found: install redis-tools (bash scripts/test.sh does it)", name)
		if os.Getenv("CI") != "" || os.Getenv("LEAFD_TEST_REQUIRE") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}
