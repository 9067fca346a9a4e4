package main

// The hostile-input suite, run against the built binary: Redis's own protocol
// test cases (tests/unit/protocol.tcl), the pre-AUTH limits, password guessing, the admin
// port's authentication, memory under the worst input shapes (VmRSS/VmHWM of the process),
// and descriptors under `prlimit --nofile`.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// multibulk encodes a command in RESP.
func multibulk(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

// rawDial connects to addr with a deadline for the whole exchange.
func rawDial(t testing.TB, addr string, d time.Duration) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(d))
	return c
}

// exchange sends in, then reads until the server closes (or the deadline).
func exchange(t testing.TB, addr, in string) string {
	t.Helper()
	c := rawDial(t, addr, 20*time.Second)
	go func() { _, _ = c.Write([]byte(in)) }()
	got, _ := io.ReadAll(c)
	return string(got)
}

// TestHostileRedisProtocol: Redis 7's tests/unit/protocol.tcl cases, byte for byte, against
// the server (in-process: the same code as the binary, under the test's race detector).
func TestHostileRedisProtocol(t *testing.T) {
	l := startInProcess(t)
	for _, tc := range []struct{ name, in, want string }{
		{"Handle an empty query", "\r\nPING\r\nQUIT\r\n", "+PONG\r\n+OK\r\n"},
		{"Negative multibulk length", "*-10\r\nPING\r\nQUIT\r\n", "+PONG\r\n+OK\r\n"},
		{"Out of range multibulk length", "*3000000000\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"Wrong multibulk payload header", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", "-ERR Protocol error: expected '$', got 'f'\r\n"},
		{"Negative multibulk payload length", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"Out of range multibulk payload length", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"Non-number multibulk payload length", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"Multi bulk request not followed by bulk arguments", "*1\r\nfoo\r\n", "-ERR Protocol error: expected '$', got 'f'\r\n"},
		{"Generic wrong number of args", "PING x y z\r\nQUIT\r\n", "-ERR wrong number of arguments for 'ping' command\r\n+OK\r\n"},
		{"Unbalanced number of quotes", "set \"\"\"test-key\"\"\" test-value\r\nping\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exchange(t, l.Addr, tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	// Protocol desync regression tests: after "\x00", "*\x00" or "$\x00" the client writes
	// without end (protocol.tcl writes the word "payload" over and over); the server must
	// answer a protocol error and close within Redis's 30 seconds.
	for i, seq := range []string{"\x00", "*\x00", "$\x00"} {
		t.Run(fmt.Sprintf("Protocol desync regression test #%d", i+1), func(t *testing.T) {
			c := rawDial(t, l.Addr, 30*time.Second)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if _, err := c.Write([]byte(seq)); err != nil {
					return
				}
				for {
					if _, err := c.Write([]byte(strings.Repeat("payload", 1024))); err != nil {
						return
					}
				}
			}()
			line, err := bufio.NewReader(c).ReadString('\n')
			if !strings.Contains(line, "Protocol error") {
				t.Errorf("got %q, %v; want a protocol error", line, err)
			}
			_ = c.Close()
			<-done
		})
	}
}

// writeSecret writes a one-line secret file.
func writeSecret(t testing.TB, s string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte(s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestHostileAuth: the password from a file stays out of the command line; the pre-AUTH
// limits hold for multibulk and inline commands; guessing is answered, counted, logged once
// a second and disconnected after 10 failures; echoed control bytes are escaped; the
// argument cap holds after AUTH.
func TestHostileAuth(t *testing.T) {
	const pass = "pw-from-a-file"
	l := e2e.Start(t, "--requirepass-file", writeSecret(t, pass))
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", l.PID()))
	if err != nil || bytes.Contains(cmdline, []byte(pass)) {
		t.Errorf("/proc/<pid>/cmdline: %q, %v; want no password", cmdline, err)
	}
	long := strings.Repeat("a", 20*1024)
	unauthBulk := "*2\r\n$4\r\nAUTH\r\n$20000\r\n" + strings.Repeat("b", 20000) + "\r\n"
	for _, tc := range []struct{ name, in, want string }{
		{"inline over 16 KiB", "PING " + long + "\r\n", "-ERR Protocol error: too big inline request\r\n"},
		{"endless inline", long, "-ERR Protocol error: too big inline request\r\n"},
		{"11 arguments", "*11\r\n", "-ERR Protocol error: unauthenticated multibulk length\r\n"},
		{"inline 11 arguments", "a b c d e f g h i j k\r\n", "-ERR Protocol error: unauthenticated multibulk length\r\n"},
		{"bulk over 16 KiB", unauthBulk, "-ERR Protocol error: unauthenticated bulk length\r\n"},
		{"after AUTH 20 KiB inline is fine", "AUTH " + pass + "\r\nECHO " + long + "\r\nQUIT\r\n", "+OK\r\n$20480\r\n" + long + "\r\n+OK\r\n"},
		{"after AUTH 1025 arguments", "AUTH " + pass + "\r\n*1025\r\n", "+OK\r\n-ERR Protocol error: invalid multibulk length\r\n"},
		{"control bytes escaped", "AUTH " + pass + "\r\n" + string(multibulk("X\x00\x1b]0;pwned\x07", "\r\n")) + "QUIT\r\n",
			"+OK\r\n-ERR unknown command 'X\\x00\\x1b]0;pwned\\x07', with args beginning with: '\\x0d\\x0a' \r\n+OK\r\n"},
		{"guessing", strings.Repeat("AUTH guess\r\n", 200),
			strings.Repeat("-WRONGPASS invalid username-password pair or user is disabled.\r\n", 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exchange(t, l.Addr, tc.in); got != tc.want {
				t.Errorf("got %.300q, want %.300q", got, tc.want)
			}
		})
	}
	if n := infoIntAuth(t, l, pass, "stats", "acl_access_denied_auth"); n != 10 {
		t.Errorf("INFO acl_access_denied_auth: got %d, want 10", n)
	}
	status, body, err := l.HTTPGet("/metrics", pass)
	if err != nil || status != 200 || !strings.Contains(body, `leafd_auth_failures_total{port="resp"} 10`) {
		t.Errorf("/metrics: got %d %v, want leafd_auth_failures_total{port=\"resp\"} 10", status, err)
	}
	// One log line for the ten failures of that burst (one a second at most).
	if n := strings.Count(l.Log(), "authentication failed"); n < 1 || n > 2 {
		t.Errorf("log: %d 'authentication failed' lines for 10 failures within a second, want 1 (2 if the second turned)", n)
	}
	// The flag form warns that the secret shows in ps.
	l2 := e2e.Start(t, "--requirepass", "on-the-command-line")
	if !strings.Contains(l2.Log(), "visible to local users") {
		t.Errorf("--requirepass on the command line: no warning in the log:\n%s", l2.Log())
	}
}

// infoIntAuth reads one INFO field over an authenticated raw connection.
func infoIntAuth(t *testing.T, l *e2e.Leafd, pass, section, field string) int64 {
	t.Helper()
	return e2e.InfoField(t, exchange(t, l.Addr, "AUTH "+pass+"\r\nINFO "+section+"\r\nQUIT\r\n"), field)
}

// TestHostileAdminAuth: with --requirepass every admin endpoint needs the token, and the
// endpoints that issue IDs create nothing without it; --http-open-probes opens /healthz and a
// tag-less /readyz only; --http-auth sets a token of its own; --http-tls serves the admin port
// with the RESP certificate.
func TestHostileAdminAuth(t *testing.T) {
	const pass = "resp-pass"
	l := startInProcess(t, "--requirepass-file", writeSecret(t, pass), "--http-open-probes")
	paths := []string{"/api/segment/get/newtag", "/api/snowflake/get/x", "/readyz?tag=newtag", "/status", "/status.json", "/metrics", "/decodeSnowflakeId?snowflakeId=1"}
	for _, p := range paths {
		if status, body, err := l.HTTPGet(p, ""); err != nil || status != http.StatusUnauthorized {
			t.Errorf("%s without a token: got %d %q %v, want 401", p, status, body, err)
		}
		if status, _, err := l.HTTPGet(p, "wrong"); err != nil || status != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: got %d %v, want 401", p, status, err)
		}
	}
	if out := exchange(t, l.Addr, "AUTH "+pass+"\r\nIDS.TAGS\r\nQUIT\r\n"); out != "+OK\r\n*0\r\n+OK\r\n" {
		t.Errorf("tags after unauthenticated HTTP calls: got %q, want none created", out)
	}
	if status, body, _ := l.HTTPGet("/healthz", ""); status != 200 || body != "ok" {
		t.Errorf("open /healthz: got %d %q", status, body)
	}
	if status, body, _ := l.HTTPGet("/readyz", ""); status != 200 || body != "{\"ready\":true}\n" {
		t.Errorf("open /readyz: got %d %q, want 200 {\"ready\":true}", status, body)
	}
	if status, body, _ := l.HTTPGet("/api/segment/get/newtag", pass); status != 200 || body != "1" {
		t.Errorf("segment get with the token: got %d %q, want 200 1", status, body)
	}

	// A token of its own, TLS with the RESP certificate, probes closed.
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, cert, key)
	l2 := startInProcess(t, "--requirepass", pass, "--http-auth-file", writeSecret(t, "admin-token"),
		"--http-tls", "--tls-cert", cert, "--tls-key", key)
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // our self-signed test certificate
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {pass, 401}, {"admin-token", 200}} {
		for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
			if status, _, err := e2e.HTTPDo("https://"+l2.HTTPAddr+p, tc.token, insecure); err != nil || status != tc.want {
				t.Errorf("TLS %s with %q: got %d %v, want %d", p, tc.token, status, err, tc.want)
			}
		}
	}
	if status, _, err := e2e.HTTPDo("http://"+l2.HTTPAddr+"/healthz", "admin-token", nil); err == nil && status == 200 {
		t.Errorf("plain HTTP to the TLS admin port succeeded")
	}
	// The RESP side (TLS too) keeps its own password.
	rc, err := tls.Dial("tcp", l2.Addr, insecure)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_ = rc.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprint(rc, "AUTH admin-token\r\nAUTH "+pass+"\r\nQUIT\r\n")
	if out, _ := io.ReadAll(rc); string(out) != "-WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n+OK\r\n" {
		t.Errorf("RESP with the admin token then the password: got %q", out)
	}
}

// buildNoRace is leafd built without -race, for memory figures (the race detector multiplies
// the heap).
func buildNoRace(t *testing.T) string {
	t.Helper()
	return e2e.PlainBinary(t)
}

// procKB reads a "Vm...:  N kB" line of /proc/<pid>/status.
func procKB(t testing.TB, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestHostileMemory: the worst input shapes over many connections at once, none of them
// reading its replies — deep pipelines of 1024-argument commands (an unknown command, and
// COMMAND INFO with 1022 names), connections holding a full query buffer, and the shapes that
// cost about 100 MB each before the argument cap (690,000 empty arguments; COMMAND INFO with
// 410,000 names). The peak RSS (VmHWM) must stay within the README's bound: per connection
// --max-query-buffer + --max-output-buffer + 64 KiB of batched replies + 80 KiB of argument
// tables + 4 MiB of queued transaction (MULTI) + 64 KiB of stacks and buffers, twice over for
// the garbage collector (GOGC=100). Transactions of 4 MiB queued and never executed are held
// by connections of their own.
//
// It runs in parallel with the other tests: the bound holds whatever the scheduling (a limit
// per connection), the peak is that of its own server process, and most of its time is spent
// waiting for the writers the server stopped reading to time out.
func TestHostileMemory(t *testing.T) {
	t.Parallel()
	bin := buildNoRace(t)
	l := e2e.StartAs(t, &e2e.Leafd{Bin: bin}, "--maxclients", "200")
	pid := l.PID()
	if out := exchange(t, l.Addr, "INCR warm\r\nIDS.SNOWFLAKE 100\r\nQUIT\r\n"); !strings.HasPrefix(out, ":1\r\n") {
		t.Fatalf("warm-up: %q", out)
	}
	base := procKB(t, pid, "VmRSS")

	const perShape = 12
	tiny := make([]string, 1024)
	tiny[0] = "X"
	infoArgs := []string{"COMMAND", "INFO"}
	for len(infoArgs) < 1024 {
		infoArgs = append(infoArgs, "incr")
	}
	unknownCmd, infoCmd := multibulk(tiny...), multibulk(infoArgs...)
	var held bytes.Buffer // a command of four 1 MiB arguments, cut 1 KiB short: the buffer stays full
	held.WriteString("*4\r\n")
	for i := 0; i < 4; i++ {
		fmt.Fprintf(&held, "$%d\r\n%s\r\n", 1000*1000, strings.Repeat("h", 1000*1000))
	}
	heldCmd := held.Bytes()[:held.Len()-1024]
	var txn bytes.Buffer // a transaction of just under 4 MiB queued, never executed
	txn.WriteString("MULTI\r\n")
	for i := 0; i < 4; i++ {
		txn.Write(multibulk("ECHO", strings.Repeat("q", 1000*1000)))
	}
	var old bytes.Buffer // 690,000 empty arguments
	old.WriteString("*690000\r\n")
	old.WriteString(strings.Repeat("$0\r\n\r\n", 690000))
	oldInfo := "*410002\r\n$7\r\nCOMMAND\r\n$4\r\nINFO\r\n" + strings.Repeat("$4\r\nincr\r\n", 410000)

	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	send := func(payload []byte, repeat int) {
		c, err := net.DialTimeout("tcp", l.Addr, 5*time.Second)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetWriteDeadline(time.Now().Add(15 * time.Second))
			for i := 0; i < repeat; i++ {
				if _, err := c.Write(payload); err != nil {
					return // the server stopped reading (blocked on its replies) or closed
				}
			}
		}()
	}
	for i := 0; i < perShape; i++ {
		send(unknownCmd, 2000)
		send(infoCmd, 400)
		send(heldCmd, 1)
		send(txn.Bytes(), 1)
		send(old.Bytes(), 1)
		send([]byte(oldInfo), 1)
	}
	// The held buffers are the bulk of it: wait until the process has grown by most of them
	// (evidence that the worst case is in place), then for the writers to finish or stall.
	want := int64(perShape) * 8 * 1000 * 8 / 10 // kB: the held buffers and transactions
	e2e.Poll(90*time.Second, func() bool { return procKB(t, pid, "VmRSS")-base >= want })
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
	}
	rss, hwm := procKB(t, pid, "VmRSS"), procKB(t, pid, "VmHWM")
	conns5 := int64(len(conns))
	perConn := int64(4<<20+4<<20+1<<20+64<<10+80<<10+64<<10) / 1024 // kB
	bound := 2 * conns5 * perConn
	t.Logf("baseline RSS %d kB; under %d hostile connections RSS %d kB, peak %d kB (+%d kB); bound +%d kB (%d kB per connection)",
		base, conns5, rss, hwm, hwm-base, bound, 2*perConn)
	if rss-base < want {
		t.Errorf("RSS grew by %d kB only: the held query buffers (%d kB) never arrived", rss-base, want)
	}
	if hwm-base > bound {
		t.Errorf("peak RSS +%d kB over %d connections, above the documented bound +%d kB", hwm-base, conns5, bound)
	}
	// The server still serves, and the old shapes were refused.
	if out := exchange(t, l.Addr, "PING\r\nQUIT\r\n"); out != "+PONG\r\n+OK\r\n" {
		t.Errorf("PING under load: %q", out)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	<-done
	if n := strings.Count(l.Log(), "output buffer limits"); n != 0 {
		t.Logf("%d output-limit closures logged", n)
	}
}

// TestHostileDescriptors: under `prlimit --nofile=256`, --maxclients 10000 is lowered to what
// the limit leaves and logged; clients beyond it are refused cleanly; a client connected
// before keeps getting segment and snowflake IDs while the lease is extended (a file write
// each time) with every slot taken and the admin port flooded; the admin port answers once
// its flood is gone.
func TestHostileDescriptors(t *testing.T) {
	e2e.NeedTool(t, "prlimit")
	const pass = "fd-pass"
	l := e2e.StartAs(t, &e2e.Leafd{Prefix: []string{"prlimit", "--nofile=256:256"}},
		"--requirepass-file", writeSecret(t, pass), "--http-maxclients", "16", "--lease-window", "300ms")
	const fit = 256 - 48 - 16
	if want := fmt.Sprintf("maxclients has been reduced to %d", fit); !strings.Contains(l.Log(), want) {
		t.Fatalf("log: no %q:\n%s", want, l.Log())
	}
	// The client of record, authenticated before the flood.
	a := rawDial(t, l.Addr, 120*time.Second)
	ar := bufio.NewReader(a)
	call := func(cmd string) string {
		t.Helper()
		if _, err := a.Write([]byte(cmd + "\r\n")); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		line, err := ar.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if strings.HasPrefix(line, "$") { // a bulk (INFO): read it whole
			n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
			b := make([]byte, n+2)
			if _, err := io.ReadFull(ar, b); err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			return string(b)
		}
		return line
	}
	if got := call("AUTH " + pass); got != "+OK\r\n" {
		t.Fatalf("AUTH: %q", got)
	}
	// Every other slot, then 40 more: refused with Redis's error.
	var idle []net.Conn
	for i := 0; i < fit-1; i++ {
		c, err := net.DialTimeout("tcp", l.Addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			_ = c.Close()
		}
	}()
	refused := 0
	for i := 0; i < 40; i++ {
		c := rawDial(t, l.Addr, 10*time.Second)
		if line, _ := bufio.NewReader(c).ReadString('\n'); line == "-ERR max number of clients reached\r\n" {
			refused++
		}
		_ = c.Close()
	}
	if refused < 35 {
		t.Errorf("%d of 40 connections over the limit got 'max number of clients reached', want (nearly) all", refused)
	}
	// Flood the admin port beyond its cap.
	var flood []net.Conn
	for i := 0; i < 60; i++ {
		c, err := net.DialTimeout("tcp", l.HTTPAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("admin connection %d: %v", i, err)
		}
		flood = append(flood, c)
	}
	ext0 := e2e.InfoField(t, call("INFO snowflake"), "snowflake_lease_extensions")
	if !e2e.Poll(60*time.Second, func() bool {
		if got := call("IDS.SNOWFLAKE"); !strings.HasPrefix(got, ":") {
			t.Fatalf("IDS.SNOWFLAKE with every descriptor in use: %q\n%s", got, l.Log())
		}
		if got := call("INCR t"); !strings.HasPrefix(got, ":") {
			t.Fatalf("INCR with every descriptor in use: %q", got)
		}
		return e2e.InfoField(t, call("INFO snowflake"), "snowflake_lease_extensions") >= ext0+3
	}) {
		t.Fatalf("the lease was not extended 3 times in 60s with every slot taken\n%s", l.Log())
	}
	if got := e2e.InfoField(t, call("INFO clients"), "connected_clients"); got != fit {
		t.Errorf("connected_clients: got %d, want %d", got, fit)
	}
	for _, c := range flood {
		_ = c.Close()
	}
	if status, _, err := l.HTTPGet("/metrics", pass); err != nil || status != 200 {
		t.Errorf("/metrics after the admin flood: got %d %v", status, err)
	}
	if strings.Contains(l.Log(), "too many open files") {
		t.Errorf("the process ran out of descriptors:\n%s", l.Log())
	}
}
