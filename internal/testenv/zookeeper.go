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
		z.proc = &proc{t: t, name: "zookeeper", logPath: filepath.Join(dir, "zookeeper.log"), argv: []string{
			java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Djava.net.preferIPv4Stack=true",
			"-Dzookeeper.jmx.log4j.disable=true",
			"-Dorg.slf4j.simpleLogger.showDateTime=true",
			"-cp", cp,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath,
		}}
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

func (z *ZooKeeper) start() error {
	if err := z.proc.start(); err != nil {
		return err
	}
	return z.proc.waitReady(time.Minute, func() error {
		out, err := FourLetter(z.Addr(), "srvr", time.Second)
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Mode: standalone") {
			return fmt.Errorf("srvr: %q", out)
		}
		return nil
	})
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
func (z *ZooKeeper) Start() {
	z.t.Helper()
	if err := z.start(); err != nil {
		z.t.Fatalf("testenv: restart: %v\n--- zookeeper log:\n%s", err, z.proc.logTail())
	}
}
