package testenv

import "testing"

// Tool returns the path of the program name, which the Debian package pkg provides. When it
// is not installed the test is skipped, or fails when CI or LEAFD_TEST_REQUIRE is set
// (scripts/test.sh installs it).
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, ok := lookBin([]string{name}, "/usr/sbin", "/sbin", "/usr/local/sbin")
	if !ok {
		missing(t, "%s not found (Debian package %s)", name, pkg)
	}
	return p
}

// FreePort returns a loopback TCP port that was free a moment ago (ServerPort), for a tool
// the test runs that cannot bind port 0 and report the port it got (redis-server, a
// container with host networking).
func FreePort(t testing.TB) int {
	t.Helper()
	return freePort(t)
}
