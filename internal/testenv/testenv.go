// Package testenv gives integration tests real services: a MySQL/MariaDB DSN and a ZooKeeper
// address supplied by the project's test script, or private MariaDB and ZooKeeper processes
// started on free loopback ports with throw-away data directories, which tests can pause,
// kill and restart to provoke outages.
//
// When a service is missing (environment variable unset, binaries not installed) the test is
// skipped, or fails when CI or LEAFD_TEST_REQUIRE is set, so that CI cannot pass by skipping.
// Run everything with the services via `bash scripts/test.sh`.
//
// The helpers call t.Fatal, so call them and the methods of the returned values from the test
// goroutine.
package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment variables read by this package.
const (
	// EnvMySQLDSN is a go-sql-driver DSN of an existing MySQL/MariaDB server whose user may
	// create and drop databases, e.g. root@tcp(127.0.0.1:3306)/.
	EnvMySQLDSN = "LEAFD_TEST_MYSQL_DSN"
	// EnvZK is a ZooKeeper address (host:port, or a comma-separated list).
	EnvZK = "LEAFD_TEST_ZK"
	// EnvRequire, like CI, turns a missing service into a test failure instead of a skip.
	EnvRequire = "LEAFD_TEST_REQUIRE"
)

const howToRun = "run `bash scripts/test.sh` to run all tests with MariaDB and ZooKeeper"

// required reports whether a missing service must fail the test rather than skip it.
func required() bool {
	return os.Getenv("CI") != "" || os.Getenv(EnvRequire) != ""
}

// missing skips the test, or fails it when services are required, saying how to provide them.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + "; " + howToRun
	if required() {
		t.Fatal(msg + " (failing instead of skipping because CI or " + EnvRequire + " is set)")
	}
	t.Skip(msg)
}

// freePort returns a loopback TCP port that was free a moment ago (ServerPort).
func freePort(t testing.TB) int {
	t.Helper()
	return ServerPort(t)
}

// ServerPort returns a loopback TCP port for a server a test starts, free a moment ago: a
// pick, then the server's own bind. It is for servers that cannot bind port 0 and report
// the port they got — the external daemons of this package (MariaDB, ZooKeeper, Galera
// nodes, whose ports are also written into their peers' configuration), other tools
// (redis-server) and a leafd that names itself by its listen address before it binds
// (e2e.FreeAddr). A server written in Go listens on 127.0.0.1:0 and hands its listener
// over instead.
//
// The port is taken below the kernel's ephemeral range (32768 and up on Linux), never from
// it: a port from that range can become another process's outgoing source port between the
// pick and the server's bind, which is how "bind: address already in use" hit the suite on
// busy machines. Below it only another server that picked the same port can collide; the
// single-server starts (MariaDB, ZooKeeper, leafd) retry on a new pick when that happens.
func ServerPort(t testing.TB) int {
	t.Helper()
	high := serverPortCeiling()
	for range 200 {
		port := serverPortLow + rand.IntN(high-serverPortLow)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			_ = l.Close()
			return port
		}
	}
	t.Fatal("testenv: no free loopback port below the ephemeral range in 200 tries")
	return 0
}

// serverPorts returns n distinct ServerPort picks.
func serverPorts(t testing.TB, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var ports []int
	for try := 0; len(ports) < n; try++ {
		if try > 1000 {
			t.Fatalf("testenv: no %d distinct free ports below the ephemeral range", n)
		}
		if p := ServerPort(t); !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports
}

// The range ServerPort picks from: above the well-known and common service ports, below
// Linux's default ip_local_port_range.
const serverPortLow, serverPortHigh = 20000, 32768

// serverPortCeiling is serverPortHigh, or the start of this machine's ephemeral range
// (net.ipv4.ip_local_port_range) when it starts lower, down to serverPortLow+1000.
func serverPortCeiling() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return serverPortHigh
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return serverPortHigh
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return serverPortHigh
	}
	return min(serverPortHigh, max(low, serverPortLow+1000))
}

// lookBin finds the first of names on PATH or in dirs (sbin directories are often not on the
// PATH of unprivileged users).
func lookBin(names []string, dirs ...string) (string, bool) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, true
		}
	}
	for _, d := range dirs {
		for _, n := range names {
			p := d + "/" + n
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, true
			}
		}
	}
	return "", false
}

// proc is one restartable child process whose output goes to a log file. Its wait goroutine
// is owned by proc: kill and stop wait for it, and the test cleanup kills the process.
type proc struct {
	t       testing.TB
	name    string
	argv    []string
	env     []string // added to this process's environment
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current process has exited
	paused bool
}

// start launches the process; the caller then waits for readiness.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running", p.name)
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor once started
	fmt.Fprintf(logf, "\n=== testenv %s: starting %q\n", time.Now().Format(time.RFC3339Nano), p.argv)
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done, p.paused = cmd, done, false
	return nil
}

// exited returns a channel closed when the current process exits (closed if none).
func (p *proc) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		p.t.Fatalf("testenv: %s is not running", p.name)
	}
	select {
	case <-p.done:
		p.t.Fatalf("testenv: %s has exited", p.name)
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("testenv: signal %s: %v", p.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
		// kill(2) only queues the stop: each thread stops when it next leaves the kernel. Wait
		// until every thread is stopped, so that what the test does next meets a frozen server.
		if !waitStopped(p.cmd.Process.Pid, 5*time.Second) {
			p.t.Fatalf("testenv: %s not stopped 5s after SIGSTOP", p.name)
		}
	case syscall.SIGCONT:
		p.paused = false
	}
}

// terminate ends the process: gracefully (SIGTERM, then SIGKILL after grace) or at once.
// It is a no-op when the process is not running.
func (p *proc) terminate(graceful bool, grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	select {
	case <-p.done:
	default:
		if graceful {
			if p.paused {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
			}
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(grace):
			}
		}
		_ = p.cmd.Process.Kill() // works on a stopped process too
		<-p.done
	}
	p.cmd, p.paused = nil, false
}

// logTail returns the end of the process log, for failure messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	const max = 6000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// errExited: the process ended before it was ready.
var errExited = errors.New("exited during startup")

// waitReady polls ready until it succeeds, the process exits or timeout passes.
func (p *proc) waitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	exited := p.exited()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s: %w", p.name, errExited)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", p.name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
