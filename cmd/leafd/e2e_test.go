package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/redis/go-redis/v9"
)

// End-to-end tests of the single-node server on its embedded defaults: in-process where the
// scenario does not kill, signal or restart the process, else the built binary.

func TestRedisCLI(t *testing.T) {
	e2e.NeedTool(t, "redis-cli")
	l := startInProcess(t, "--wait-timeout", "10s") // a first load on a loaded machine may be slow
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"INCR", "order"}, "1"},
		{[]string{"INCR", "order"}, "2"},
		{[]string{"INCRBY", "order", "10"}, "12"},
		{[]string{"IDS.SEGMENT", "order", "3"}, "13\n14\n15"},
		{[]string{"IDS.TAGS"}, "order"},
		{[]string{"IDS.CREATE", "pay", "STEP", "10", "START", "500"}, "OK"},
		{[]string{"INCR", "pay"}, "500"},
		{[]string{"INCR"}, "ERR wrong number of arguments for 'incr' command"},
		{[]string{"NOSUCH", "x"}, "ERR unknown command 'NOSUCH', with args beginning with: 'x'"},
	}
	for _, tt := range tests {
		got, err := l.RedisCLI(tt.args...)
		if err != nil || got != tt.want {
			t.Errorf("redis-cli %s: got %q (%v), want %q", strings.Join(tt.args, " "), got, err, tt.want)
		}
	}
	id, err := l.RedisCLI("IDS.SNOWFLAKE")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		t.Fatalf("IDS.SNOWFLAKE: got %q, want an integer", id)
	}
	dec, err := l.RedisCLI("-3", "IDS.DECODE", id)
	if err != nil || !strings.Contains(dec, "worker_id") || !strings.Contains(dec, "timestamp_ms") {
		t.Errorf("IDS.DECODE: got %q, %v", dec, err)
	}
	info, err := l.RedisCLI("INFO", "server")
	if err != nil || !strings.Contains(info, "leafd_version:") {
		t.Errorf("INFO server: got %q, %v", info, err)
	}
}

func TestRedisBenchmark(t *testing.T) {
	bench := e2e.NeedTool(t, "redis-benchmark")
	l := startInProcess(t, "--wait-timeout", "10s") // a first load on a loaded machine may be slow
	host, port, _ := net.SplitHostPort(l.Addr)
	for _, extra := range [][]string{nil, {"-P", "16"}} {
		args := append([]string{"-h", host, "-p", port, "-t", "incr", "-n", "20000", "-c", "20", "-q"}, extra...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, bench, args...).CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "INCR:") || strings.Contains(string(out), "ERR") {
			t.Fatalf("redis-benchmark %v: %v\n%s", extra, err, out)
		}
	}
	// redis-benchmark uses the key counter:__rand_int__: 40000 INCRs in all, none failed.
	got, err := l.RedisCLI("INCR", "counter:__rand_int__")
	if err != nil || got != "40001" {
		t.Errorf("INCR after the benchmarks: got %q (%v), want 40001", got, err)
	}
}

// TestKillRestartNeverReissues kills leafd with SIGKILL under load, many times, and checks that
// no ID handed out by one run is handed out by a later run.
func TestKillRestartNeverReissues(t *testing.T) {
	l := e2e.Start(t, "--default-step", "50")
	var runs [][]*e2e.ConnLoad
	for round := range 6 {
		var n e2e.Counts
		var stop atomic.Bool
		wait := e2e.Background(e2e.Load{Tag: "k", Conns: 8, Count: &n, Addrs: e2e.Addrs(l), Stop: stop.Load})
		// The kill comes after a number of IDs that grows with the round (several refills of 50).
		want := int64(200 + 100*round)
		e2e.Eventually(t, time.Minute, fmt.Sprintf("round %d: %d IDs before the kill", round, want), func() bool { return n.OK.Load() >= want })
		l.Kill()
		stop.Store(true)
		runs = append(runs, wait())
		l.Restart()
	}
	all := e2e.CheckUnique(t, runs...)
	for _, r := range runs {
		e2e.CheckOrder(t, r)
	}
	if len(all) < 1000 {
		t.Errorf("only %d IDs issued across the runs; the test did not exercise refills", len(all))
	}
}

// TestHostileInputsBinary sends the inputs that crash or hang redcon v1.6.4 to the built
// binary and checks it answers, closes, and keeps serving.
func TestHostileInputsBinary(t *testing.T) {
	l := e2e.Start(t)
	for _, in := range []string{
		"*1\r\n$9223372036854775807\r\nab",
		"*3000000000\r\n",
		"*9223372036854775807\r\n",
		"*1\r\n$2000000000\r\n" + strings.Repeat("x", 1<<16),
		strings.Repeat("\x00", 100000),
	} {
		c, err := net.Dial("tcp", l.Addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		go func() { _, _ = c.Write([]byte(in)) }()
		out, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(out), "-ERR Protocol error") {
			t.Errorf("input %q...: got %q, want a protocol error and a close", clipStr(in, 30), clipStr(string(out), 80))
		}
	}
	if got, err := l.RedisCLI("PING"); got != "PONG" {
		t.Fatalf("after hostile inputs: PING got %q, %v\n%s", got, err, l.Log())
	}
}

func clipStr(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TestGracefulShutdown: SIGTERM while clients pipeline; every reply read is complete, the
// process exits 0, and a restart continues above every issued ID.
func TestGracefulShutdown(t *testing.T) {
	l := e2e.Start(t)
	c := l.Client(3)
	ctx := context.Background()
	last, err := c.Incr(ctx, "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Stop(15 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, l.Log())
	}
	if !strings.Contains(l.Log(), "stopped") {
		t.Errorf("log does not show an orderly stop:\n%s", l.Log())
	}
	l.Restart()
	v, err := l.Client(3).Incr(ctx, "g").Result()
	if err != nil || v <= last {
		t.Errorf("after restart: got %d, %v; want above %d", v, err, last)
	}
}

// TestDataDirLocked: a second process on the same data dir fails with a clear error.
func TestDataDirLocked(t *testing.T) {
	l := startInProcess(t)
	cmd := exec.Command(e2e.Binary(), "--data-dir", l.DataDir, "--addr", "127.0.0.1:0", "--http-addr", "")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("second leafd on the same data dir started:\n%s", out)
	}
	if !strings.Contains(string(out), "another leafd process") {
		t.Errorf("second leafd: got %q, want a message naming the lock", out)
	}
}

// TestConfigSources: flags beat LEAFD_* variables, which beat the config file.
func TestConfigSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "leafd.conf")
	if err := os.WriteFile(file, []byte("# comment\naddr = 127.0.0.1:1111\nname fromfile\nmax-batch 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LEAFD_NAME": "fromenv", "LEAFD_CONFIG": file}
	cfg, err := loadConfig([]string{"--addr", "127.0.0.1:2222"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:2222" || cfg.Name != "fromenv" || cfg.MaxBatch != 7 {
		t.Errorf("got addr %s name %s max-batch %d, want 127.0.0.1:2222 fromenv 7", cfg.Addr, cfg.Name, cfg.MaxBatch)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad bits", []string{"--snowflake-bits", "41/10/11"}, nil, "sum to 63"},
		{"bad env", nil, map[string]string{"LEAFD_MAXCLIENTS": "many"}, "LEAFD_MAXCLIENTS"},
		{"reuse without zk", []string{"--worker-reuse"}, nil, "--worker-reuse needs --zk-addrs"},
		{"bad ratio", []string{"--preload-ratio", "1.5"}, nil, "--preload-ratio"},
		{"unknown flag", []string{"--nope"}, nil, "unknown flag --nope"},
	} {
		_, err := loadConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if err := os.WriteFile(file, []byte("nosuch = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = loadConfig([]string{"--config", file}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `unknown option "nosuch"`) {
		t.Errorf("unknown file option: got %v", err)
	}
}

// TestReadmeOptions: every option is documented in the full options table
// (docs/REFERENCE.md, which the README links to).
func TestReadmeOptions(t *testing.T) {
	readme, err := os.ReadFile("../../docs/REFERENCE.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range optionNames() {
		if !strings.Contains(string(readme), fmt.Sprintf("`--%s`", name)) {
			t.Errorf("docs/REFERENCE.md does not document --%s", name)
		}
	}
}

// TestTLS: with --tls-cert/--tls-key the RESP port speaks TLS; plain TCP gets nothing.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certFile, keyFile)
	l := startInProcess(t, "--tls-cert", certFile, "--tls-key", keyFile)
	c := redis.NewClient(&redis.Options{Addr: l.Addr, MaxRetries: -1,
		TLSConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}})
	defer c.Close()
	v, err := c.Incr(context.Background(), "tls").Result()
	if err != nil || v != 1 {
		t.Fatalf("INCR over TLS: got %d, %v; want 1", v, err)
	}
	plain := redis.NewClient(&redis.Options{Addr: l.Addr, MaxRetries: -1, ReadTimeout: 2 * time.Second})
	defer plain.Close()
	if err := plain.Ping(context.Background()).Err(); err == nil {
		t.Errorf("plain PING to a TLS port succeeded")
	}
	// A bad certificate path is a start-up error naming the option.
	out, err := exec.Command(e2e.Binary(), "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", "",
		"--tls-cert", filepath.Join(dir, "missing.pem"), "--tls-key", keyFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--tls-cert") {
		t.Errorf("missing certificate: got %v\n%s", err, out)
	}
}

func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// optionNames lists the option names, for the docs test.
func optionNames() []string {
	var c Config
	fs := flagSet(&c)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	return names
}
