package e2e

// Addresses for the servers a test starts: leafd's own ports are chosen by the kernel at the
// bind (Start) except where leafd must know its address before it binds (needsAddr,
// FreeAddr); a server that is down is an address that refuses (RefusedAddr); an identity
// that only names an instance is no port at all (Identity).

import (
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/leafd/leafd/internal/testenv"
)

// FreeAddr returns a loopback address with a port that was free a moment ago, below the
// ephemeral range (testenv.ServerPort). It is for an address that must be known before the
// server starts and cannot be read back from it: leafd's default ZooKeeper identity is its
// listen address, which needs a fixed port. Anything else listens on 127.0.0.1:0 and
// reports its port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(testenv.ServerPort(t))
}

// needsAddr reports whether leafd, run with args, needs a fixed listen port: with ZooKeeper
// and no --advertise-addr its identity there is the host's address and the listen port, which
// must stay the same across restarts (on port 0 the start is refused).
func needsAddr(args []string) bool {
	return !HasFlag(args, "--advertise-addr") && HasFlag(args, "--zk-addrs")
}

// isPortZero reports whether addr asks the kernel for a port (host:0).
func isPortZero(addr string) bool { return strings.HasSuffix(addr, ":0") }

// RefusedAddr is a loopback address that refuses every connection, for a server that is
// down: a socket bound to a port the kernel chose and never listening, held until cleanup,
// so that no other server or outgoing connection takes the port meanwhile.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

var identities atomic.Int32

// Identity is an --advertise-addr for an instance whose advertised address only names it
// in ZooKeeper (no other instance dials it, nothing binds it): an address of TEST-NET-1
// (192.0.2.0/24, never routed) with a port unique in this test binary.
func Identity() string {
	return "192.0.2.1:" + strconv.Itoa(10000+int(identities.Add(1)))
}
