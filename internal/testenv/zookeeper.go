package testenv

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvZKClasspath overrides the Java classpath used by StartZooKeeper (default: the Debian
// zookeeper package, /usr/share/java/zookeeper.jar, whose manifest names its dependencies).
const EnvZKClasspath = "LEAFD_TEST_ZK_CLASSPATH"

// ZKAddr returns the ZooKeeper address in LEAFD_TEST_ZK (started by scripts/test.sh or by the
// developer). When it is unset the test is skipped, or fails under CI or LEAFD_TEST_REQUIRE.
func ZKAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvZK)
	if addr == "" {
		missing(t, "%s is not set (host:port of a ZooKeeper server)", EnvZK)
	}
	return addr
}

// ZooKeeper is a private standalone ZooKeeper for one test, on a free 127.0.0.1 port with a
// fresh data directory. It is killed and its files removed when the test ends.
type ZooKeeper struct {
	t    testing.TB
	port int
	dir  string
	proc *proc
	// quorum: a member of an ensemble, ready once it leads or follows (standalone otherwise).
	quorum bool
}

// zkClasspath finds the ZooKeeper server classes.
func zkClasspath() (string, bool) {
	if cp := os.Getenv(EnvZKClasspath); cp != "" {
		return cp, true
	}
	const debJar = "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(debJar); err != nil {
		return "", false
	}
	cp := debJar
	// Without an SLF4J binding ZooKeeper logs nothing; a simple one makes its log useful.
	if _, err := os.Stat("/usr/share/java/slf4j-simple.jar"); err == nil {
		cp += ":/usr/share/java/slf4j-simple.jar"
	}
	return cp, true
}

// StartZooKeeper starts a standalone ZooKeeper server (QuorumPeerMain) and waits until it
// serves requests. Missing java or ZooKeeper jars skip the test, or fail it under CI or
// LEAFD_TEST_REQUIRE.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	java, ok := lookBin([]string{"java"}, "/usr/bin")
	if !ok {
		missing(t, "java not found (install the zookeeper package, which brings a JRE)")
	}
	cp, ok := zkClasspath()
	if !ok {
		missing(t, "ZooKeeper not found: no /usr/share/java/zookeeper.jar (install the zookeeper package) and %s unset", EnvZKClasspath)
	}
	dir := t.TempDir()
	z := &ZooKeeper{t: t, dir: dir}
	for attempt := 1; ; attempt++ {
		z.port = freePort(t)
		// Short ticks make session expiry quick to test; maxSessionTimeout still allows the
		// session timeouts production clients ask for.
		cfg := strings.Join([]string{
			"tickTime=500",
			"minSessionTimeout=1000",
			"maxSessionTimeout=60000",
			"initLimit=10",
			"syncLimit=5",
			"dataDir=" + filepath.Join(dir, "data"),
			"clientPort=" + strconv.Itoa(z.port),
			"clientPortAddress=127.0.0.1",
			"admin.enableServer=false",
			"4lw.commands.whitelist=*",
			"standaloneEnabled=true",
		}, "\n") + "\n"
		cfgPath := filepath.Join(dir, "zoo.cfg")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		z.proc = &proc{t: t, name: "zookeeper", logPath: filepath.Join(dir, "zookeeper.log"), argv: zkArgv(java, cp, cfgPath)}
		err := z.start()
		if err == nil {
			break
		}
		z.proc.terminate(false, 0)
		if attempt == 3 || !strings.Contains(z.proc.logTail(), "Address already in use") {
			t.Fatalf("testenv: %v\n--- zookeeper log:\n%s", err, z.proc.logTail())
		}
	}
	t.Cleanup(func() { z.proc.terminate(false, 0) })
	return z
}

// zkArgv runs QuorumPeerMain on cfgPath with a small, quickly started JVM.
func zkArgv(java, cp, cfgPath string) []string {
	return []string{
		java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.net.preferIPv4Stack=true",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-cp", cp,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath,
	}
}

// zkMode is the "Mode:" of a srvr reply (standalone, leader, follower), "" when none.
func zkMode(srvr string) string {
	for _, line := range strings.Split(srvr, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
			return m
		}
	}
	return ""
}

func (z *ZooKeeper) start() error {
	if err := z.proc.start(); err != nil {
		return err
	}
	return z.proc.waitReady(time.Minute, z.ready)
}

// ready: the server answers srvr as standalone (an ensemble's member: as leader or follower).
func (z *ZooKeeper) ready() error {
	out, err := FourLetter(z.Addr(), "srvr", time.Second)
	if err != nil {
		return err
	}
	if m := zkMode(out); !z.quorum && m != "standalone" || z.quorum && m != "leader" && m != "follower" {
		return fmt.Errorf("srvr: %q", out)
	}
	return nil
}

// FourLetter sends a ZooKeeper four-letter command (ruok, srvr, mntr, ...) to addr and
// returns the reply.
func FourLetter(addr, cmd string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), err
	}
	return string(b), nil
}

// Addr is the server's host:port.
func (z *ZooKeeper) Addr() string { return "127.0.0.1:" + strconv.Itoa(z.port) }

// Pause freezes the server with SIGSTOP: sessions stay connected but nothing answers.
func (z *ZooKeeper) Pause() { z.t.Helper(); z.proc.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (z *ZooKeeper) Resume() { z.t.Helper(); z.proc.signal(syscall.SIGCONT) }

// Kill ends the server with SIGKILL; persistent nodes survive for Start (ZooKeeper fsyncs
// its transaction log before acknowledging).
func (z *ZooKeeper) Kill() { z.proc.terminate(false, 0) }

// Stop shuts the server down (SIGTERM), killing it if that takes over 10s.
func (z *ZooKeeper) Stop() { z.proc.terminate(true, 10*time.Second) }

// Start restarts a killed or stopped server on the same port and data directory and waits
// until it serves.
//
// The port is the clients' address, so the restart must bind it again. It was free since the
// stop, and another test's server or a ServerPort probe (which binds a free port for an
// instant) may hold it: a bind refused is retried for up to 10 s, by which time a probe has
// let go; a server that keeps the port fails the test.
func (z *ZooKeeper) Start() {
	z.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := z.start()
		if err == nil {
			return
		}
		log := z.proc.logTail()
		if i := strings.LastIndex(log, "=== testenv "); i >= 0 {
			log = log[i:] // this attempt's output only
		}
		if !strings.Contains(log, "Address already in use") || time.Now().After(deadline) {
			z.t.Fatalf("testenv: restart: %v\n--- zookeeper log:\n%s", err, z.proc.logTail())
		}
		z.proc.terminate(false, 0)
		time.Sleep(500 * time.Millisecond)
	}
}

// ZKEnsemble is a private ZooKeeper ensemble of several members on loopback, each with its
// own data directory, on ports below the ephemeral range of outgoing connections (ServerPort). Members are killed and their files removed when the test ends.
type ZKEnsemble struct {
	t       testing.TB
	Members []*ZooKeeper
}

// StartZKEnsemble starts an ensemble of n members (QuorumPeerMain, tickTime 500 ms, so that
// an election takes about a second) and waits until every member leads or follows.
func StartZKEnsemble(t testing.TB, n int) *ZKEnsemble {
	t.Helper()
	java, ok := lookBin([]string{"java"}, "/usr/bin")
	if !ok {
		missing(t, "java not found (install the zookeeper package, which brings a JRE)")
	}
	cp, ok := zkClasspath()
	if !ok {
		missing(t, "ZooKeeper not found: no /usr/share/java/zookeeper.jar (install the zookeeper package) and %s unset", EnvZKClasspath)
	}
	e := &ZKEnsemble{t: t}
	// Picked ports (ServerPort), not retried: each member's ports are in every member's
	// configuration, so a port another server took means a new ensemble, not a new member.
	ports := serverPorts(t, 3*n) // client, quorum, election per member
	var servers []string
	for i := range n {
		servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
	}
	for i := range n {
		dir := t.TempDir()
		z := &ZooKeeper{t: t, dir: dir, port: ports[3*i], quorum: true}
		data := filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		cfg := strings.Join(append([]string{
			"tickTime=500",
			"minSessionTimeout=1000",
			"maxSessionTimeout=60000",
			"initLimit=10",
			"syncLimit=4",
			"dataDir=" + data,
			"clientPort=" + strconv.Itoa(z.port),
			"clientPortAddress=127.0.0.1",
			"admin.enableServer=false",
			"4lw.commands.whitelist=*",
			"standaloneEnabled=false",
			"cnxTimeout=1000",
		}, servers...), "\n") + "\n"
		cfgPath := filepath.Join(dir, "zoo.cfg")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		z.proc = &proc{t: t, name: fmt.Sprintf("zookeeper-%d", i+1), logPath: filepath.Join(dir, "zookeeper.log"), argv: zkArgv(java, cp, cfgPath)}
		e.Members = append(e.Members, z)
	}
	t.Cleanup(func() {
		for _, z := range e.Members {
			z.proc.terminate(false, 0)
		}
	})
	for _, z := range e.Members {
		if err := z.proc.start(); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	for _, z := range e.Members {
		if err := z.proc.waitReady(time.Minute, z.ready); err != nil {
			t.Fatalf("testenv: ensemble: %v\n--- log:\n%s", err, z.proc.logTail())
		}
	}
	return e
}

// Connect is the connection string of every member.
func (e *ZKEnsemble) Connect() string {
	var a []string
	for _, z := range e.Members {
		a = append(a, z.Addr())
	}
	return strings.Join(a, ",")
}

// Leader is the index of the member that leads now, or -1 when none answers as leader.
func (e *ZKEnsemble) Leader() int {
	for i, z := range e.Members {
		if out, err := FourLetter(z.Addr(), "srvr", time.Second); err == nil && zkMode(out) == "leader" {
			return i
		}
	}
	return -1
}

// WaitLeader waits up to timeout for a member other than not (-1: any) to lead and returns it.
func (e *ZKEnsemble) WaitLeader(not int, timeout time.Duration) int {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if l := e.Leader(); l >= 0 && l != not {
			return l
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("testenv: no new ZooKeeper leader within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
