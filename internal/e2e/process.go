package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ReadyMsg is the message of the structured log line leafd writes once its RESP port accepts
// connections (cmd/leafd/run.go); the harness waits for it after every start. Its "addr"
// field is the RESP address.
const ReadyMsg = "leafd ready"

// NotReadyMsg is the start line in place of ReadyMsg when the segment store fails at the
// start (cmd/leafd/readylog.go): the RESP port accepts connections, /readyz says why it is
// not ready. The harness takes either as the end of a start.
const NotReadyMsg = "leafd serving, not ready: the store fails"

// started reports whether a log line is a start line (ReadyMsg or NotReadyMsg).
func started(m map[string]any) bool { return m["msg"] == ReadyMsg || m["msg"] == NotReadyMsg }

// StartTimeout bounds the wait for the ready line (a -race binary on a loaded 2-core machine
// may take a while to open its stores).
const StartTimeout = 60 * time.Second

var (
	binary, binDir, binPkg string

	plainOnce sync.Once
	plainBin  string
	plainErr  error
)

// Build compiles the leafd command in pkgDir with -race into a temporary directory and makes
// it the binary Start runs. Call it from TestMain; cleanup removes the directory.
func Build(pkgDir string) (cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "leafd-bin-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "leafd")
	if err := goBuild(pkgDir, bin, "-race"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	binary, binDir, binPkg = bin, dir, pkgDir
	return func() { _ = os.RemoveAll(dir) }, nil
}

// Main is the TestMain of a package whose tests run the leafd command of pkgDir: it Builds
// the binary (exiting 1 when that fails), runs the tests, removes the binary and exits with
// their status.
func Main(m *testing.M, pkgDir string) {
	cleanup, err := Build(pkgDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// RunTool runs the built binary with args (an admin command such as adopt or raise-max-id)
// within timeout and returns its combined output and exit status. With env not nil the
// command sees only env beside PATH and GORACE=halt_on_error=1, none of the test's own
// variables. A command that cannot be run fails the test.
func RunTool(t testing.TB, timeout time.Duration, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(), args...)
	if env != nil {
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "GORACE=halt_on_error=1"}, env...)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("leafd %s: %v\n%s", strings.Join(args, " "), err, out)
	return "", 0
}

func goBuild(pkgDir, out string, flags ...string) error {
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, ".")...)
	build.Dir = pkgDir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building leafd %s: %w", strings.Join(flags, " "), err)
	}
	return nil
}

// Binary is the path of the binary Build made.
func Binary() string { return binary }

// PlainBinary is the leafd command of Build's package built without -race, made at the first
// call and removed with Build's binary. It is for the tests whose subject is volume (a
// million marks through the admin tools), which the race detector slows some tenfold; the
// same code runs with -race in the other tests.
func PlainBinary(t testing.TB) string {
	t.Helper()
	if binDir == "" {
		t.Fatal("e2e: no leafd binary: call e2e.Build in TestMain")
	}
	plainOnce.Do(func() {
		bin := filepath.Join(binDir, "leafd-plain")
		if plainErr = goBuild(binPkg, bin); plainErr == nil {
			plainBin = bin
		}
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plainBin
}

// RunFunc runs the server in-process: it parses args like the command line, writes its JSON
// log lines to logOut, and serves until ctx ends. cmd/leafd's tests supply it around their
// run function.
type RunFunc func(ctx context.Context, args []string, logOut io.Writer) error

// Leafd is one leafd under test: a process of the binary, or the server in-process.
type Leafd struct {
	Addr     string   // RESP address
	HTTPAddr string   // admin HTTP address; empty when the args disabled it
	DataDir  string   // the data dir the harness made, or the one the args name
	Args     []string // the arguments of every (re)start, with the harness's additions

	Bin    string   // the binary; Binary() when empty
	Prefix []string // a command that runs the binary (prlimit ...)

	t       testing.TB
	run     RunFunc // in-process when set
	cancel  context.CancelFunc
	cmd     *exec.Cmd
	logMu   sync.Mutex
	log     bytes.Buffer
	logMore chan struct{} // closed and replaced on every new log line
	runFrom int           // log offset where the current run began
	exited  chan struct{}
	exitErr error

	picked bool // the harness chose the RESP port before the first run (needsAddr)
}

// Start starts the binary with its own data dir (unless args name one) and returns once the
// ready line is logged; it is killed at cleanup. Unless args name them, the RESP and admin
// ports are 127.0.0.1:0: the kernel chooses them at the bind, so no other process can take
// them between a choice and the bind, and Addr and HTTPAddr are read from the run's log
// (args naming port 0 are read the same way). The one exception is an instance that names
// itself by its listen address before it binds (needsAddr): its RESP port is picked.
// Restart binds the ports the first run reported.
func Start(t testing.TB, args ...string) *Leafd {
	t.Helper()
	return StartAs(t, &Leafd{}, args...)
}

// StartAs is Start for a process whose Bin or Prefix l sets.
func StartAs(t testing.TB, l *Leafd, args ...string) *Leafd {
	t.Helper()
	l.prepare(t, args)
	if err := l.launch(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Kill)
	l.firstReady()
	return l
}

// StartMany starts one binary process per argument list at the same time (they race for
// whatever they share) and waits for every ready line on the test's goroutine.
func StartMany(t testing.TB, argLists ...[]string) []*Leafd {
	t.Helper()
	ls := make([]*Leafd, len(argLists))
	for i, args := range argLists {
		ls[i] = &Leafd{}
		ls[i].prepare(t, args)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ls))
	for i, l := range ls {
		wg.Go(func() { errs[i] = l.launch() })
	}
	wg.Wait()
	for i, l := range ls {
		if errs[i] == nil {
			t.Cleanup(l.Kill)
		}
	}
	for i, l := range ls {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		l.firstReady()
	}
	return ls
}

// StartInProcess runs the server in this process through run (same arguments and defaults
// as Start) and returns once it logged the ready line. Stop ends it; Kill, Pause and Resume
// are for processes only. It is stopped at cleanup.
func StartInProcess(t testing.TB, run RunFunc, args ...string) *Leafd {
	t.Helper()
	l := &Leafd{run: run}
	l.prepare(t, args)
	if err := l.launch(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(30 * time.Second) })
	l.firstReady()
	return l
}

// firstReady waits for the first run's ready line, and makes the ports the run reported
// the ones every restart binds. A RESP port the harness picked (needsAddr) was free a
// moment before the start; when another server took it since (the run exits with "address
// already in use"), the run starts again on a port picked anew, up to 20 times. A port
// chosen by the kernel at the bind needs no such retry.
func (l *Leafd) firstReady() {
	l.t.Helper()
	for attempt := 1; attempt < 20 && l.picked && l.exitedInUse(); attempt++ {
		l.Addr = FreeAddr(l.t)
		setFlag(l.Args, "--addr", l.Addr)
		if err := l.launch(); err != nil {
			l.t.Fatal(err)
		}
	}
	l.waitReady()
	if isPortZero(FlagValue(l.Args, "--addr")) {
		setFlag(l.Args, "--addr", l.Addr)
	}
	if isPortZero(FlagValue(l.Args, "--http-addr")) && l.HTTPAddr != "" {
		setFlag(l.Args, "--http-addr", l.HTTPAddr)
	}
}

// setFlag sets the value FlagValue reads ("--name v" or "--name=v"), in place.
func setFlag(args []string, name, value string) {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			args[i+1] = value
			return
		}
		if strings.HasPrefix(a, name+"=") {
			args[i] = name + "=" + value
			return
		}
	}
}

func (l *Leafd) prepare(t testing.TB, args []string) {
	l.t, l.Args = t, cloneArgs(args)
	if !HasFlag(args, "--data-dir") {
		l.DataDir = t.TempDir()
		l.Args = append(l.Args, "--data-dir", l.DataDir)
	} else {
		l.DataDir = FlagValue(args, "--data-dir")
	}
	switch {
	case HasFlag(args, "--addr"):
		l.Addr = FlagValue(args, "--addr")
	case needsAddr(args):
		l.Addr, l.picked = FreeAddr(t), true
		l.Args = append(l.Args, "--addr", l.Addr)
	default:
		l.Addr = "127.0.0.1:0"
		l.Args = append(l.Args, "--addr", l.Addr)
	}
	// An admin port too: the default 127.0.0.1:8080 would collide between instances.
	if !HasArg(args, "--http-addr") {
		l.Args = append(l.Args, "--http-addr", "127.0.0.1:0")
	}
	l.HTTPAddr = FlagValue(l.Args, "--http-addr")
	l.logMore = make(chan struct{})
}

func cloneArgs(s []string) []string { return append([]string(nil), s...) }

// HasFlag reports whether args give the flag a non-empty value.
func HasFlag(args []string, name string) bool { return FlagValue(args, name) != "" }

// HasArg reports whether args name the flag at all, even with an empty value.
func HasArg(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// FlagValue is the value args give the flag ("--name v" or "--name=v"), or "".
func FlagValue(args []string, name string) string {
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

// Restart starts the stopped or killed server again with the same arguments and waits for
// its ready line. It binds the RESP and admin ports the first run reported, by number: the
// tests and their clients hold Addr and HTTPAddr across the restart (and the address is the
// instance's identity), so this is the one bind the kernel cannot choose.
//
// Between two runs another process's outgoing connection may hold one of those ports as its
// ephemeral source port for a moment (a port chosen at a bind to :0 lies in that range; seen
// in CI: "bind: address already in use"). A run that exits for that reason is started
// again, up to 50 times 100 ms apart.
func (l *Leafd) Restart() {
	l.t.Helper()
	for attempt := 1; ; attempt++ {
		if err := l.launch(); err != nil {
			l.t.Fatal(err)
		}
		if attempt >= 50 || !l.exitedInUse() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	l.waitReady()
}

// exitedInUse waits for the current run's ready line or its exit, and reports whether it
// exited because a port was in use.
func (l *Leafd) exitedInUse() bool {
	_, err := l.waitLine(started, StartTimeout)
	if err == nil {
		return false
	}
	l.logMu.Lock()
	run := l.log.String()[l.runFrom:]
	l.logMu.Unlock()
	select {
	case <-l.exited:
		return strings.Contains(run, "address already in use") ||
			l.exitErr != nil && strings.Contains(l.exitErr.Error(), "address already in use")
	default:
		return false
	}
}

// launch starts the process (or the in-process server) without waiting for it.
func (l *Leafd) launch() error {
	l.logMu.Lock()
	l.runFrom = l.log.Len()
	l.logMu.Unlock()
	l.exited = make(chan struct{})
	if l.run != nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel = cancel
		exited := l.exited
		go func() {
			l.exitErr = l.run(ctx, cloneArgs(l.Args), logWriter{l})
			close(exited)
		}()
		return nil
	}
	bin := binary
	if l.Bin != "" {
		bin = l.Bin
	}
	if bin == "" {
		return fmt.Errorf("e2e: no leafd binary: call e2e.Build in TestMain")
	}
	argv := append(append(cloneArgs(l.Prefix), bin), l.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_ = pr.Close()
		_ = pw.Close()
		return err
	}
	_ = pw.Close()
	l.cmd = cmd
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			l.appendLine(sc.Bytes())
		}
		_ = pr.Close()
	}()
	exited := l.exited
	go func() {
		err := cmd.Wait()
		<-copied // every line of the run is in the log before it counts as exited
		l.exitErr = err
		close(exited)
	}()
	return nil
}

// PID is the process id of the current run (0 in-process).
func (l *Leafd) PID() int {
	if l.cmd == nil || l.cmd.Process == nil {
		return 0
	}
	return l.cmd.Process.Pid
}

// Kill sends SIGKILL and waits for the exit (in-process: Stop).
func (l *Leafd) Kill() {
	if l.exited == nil {
		return
	}
	select {
	case <-l.exited:
		return
	default:
	}
	if l.run != nil {
		l.cancel()
		<-l.exited
		return
	}
	_ = l.cmd.Process.Kill()
	<-l.exited
}

// Stop asks for a graceful exit (SIGTERM, or the context in-process) and waits for it,
// returning the exit error; after timeout it kills.
func (l *Leafd) Stop(timeout time.Duration) error {
	if l.exited == nil {
		return nil
	}
	if l.run != nil {
		l.cancel()
	} else {
		_ = l.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-l.exited:
		return l.exitErr
	case <-time.After(timeout):
		l.Kill()
		return fmt.Errorf("leafd did not exit within %v of the stop", timeout)
	}
}

// Exited is closed when the current run ends.
func (l *Leafd) Exited() <-chan struct{} { return l.exited }

// Pause freezes the process (SIGSTOP).
func (l *Leafd) Pause() { l.signal(syscall.SIGSTOP) }

// Resume lets a paused process run again (SIGCONT).
func (l *Leafd) Resume() { l.signal(syscall.SIGCONT) }

func (l *Leafd) signal(s syscall.Signal) {
	l.t.Helper()
	if err := l.Signal(s); err != nil {
		l.t.Fatal(err)
	}
}

// Signal sends s to the process; it does not fail the test (for use off the test's
// goroutine).
func (l *Leafd) Signal(s syscall.Signal) error {
	if l.run != nil {
		return fmt.Errorf("e2e: %v needs a process, and this server runs in-process", s)
	}
	if err := l.cmd.Process.Signal(s); err != nil {
		return fmt.Errorf("%v: %w", s, err)
	}
	return nil
}
