package handlers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// helloKeys sends HELLO 3 on a new connection to addr and returns the map's keys in order.
func helloKeys(t *testing.T, addr string) []string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("HELLO 3\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "%") {
		t.Fatalf("HELLO 3 from %s: got %q, %v; want a map", addr, line, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	// skip reads one RESP3 value (the values of HELLO: bulk strings, integers, an array).
	var skip func() string
	skip = func() string {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		l = strings.TrimRight(l, "\r\n")
		switch l[0] {
		case '$':
			size, _ := strconv.Atoi(l[1:])
			b := make([]byte, size+2)
			if _, err := io.ReadFull(r, b); err != nil {
				t.Fatal(err)
			}
			return string(b[:size])
		case '*':
			k, _ := strconv.Atoi(l[1:])
			for range k {
				skip()
			}
		}
		return l
	}
	keys := make([]string, 0, n)
	for range n {
		keys = append(keys, skip())
		skip()
	}
	return keys
}

// TestHelloFieldOrder: HELLO 3 lists Redis's fields in redis-server's own order (read from a
// real redis-server, Debian package redis-server), leafd_version after them.
func TestHelloFieldOrder(t *testing.T) {
	bin := testenv.Tool(t, "redis-server", "redis-server")
	port := testenv.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	raddr := "127.0.0.1:" + strconv.Itoa(port)
	var err error
	if !testkit.Poll(10*time.Second, func() bool {
		var c net.Conn
		if c, err = net.Dial("tcp", raddr); err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("redis-server on %s: %v", raddr, err)
	}
	want := helloKeys(t, raddr)
	s := startServer(t, serverOpts{})
	got := helloKeys(t, s.addr)
	if !slices.Equal(got, append(slices.Clone(want), "leafd_version")) {
		t.Errorf("HELLO 3 keys: got %v, want redis-server's %v then leafd_version", got, want)
	}
}

// TestPTTL: PTTL and TTL answer -1 (exists, no expiry) for any key, with Redis's arity check.
func TestPTTL(t *testing.T) {
	s := startServer(t, serverOpts{autoCreate: true})
	runTranscript(t, s, []step{
		{"PTTL orders", ":-1\r\n"},
		{"TTL 2127163742994038805", ":-1\r\n"},
		{"PTTL", "-ERR wrong number of arguments for 'pttl' command\r\n"},
		{"TTL a b", "-ERR wrong number of arguments for 'ttl' command\r\n"},
	})
}

// TestNoCache: on a connection that asked for the next reply to be cached (tracking OPTIN,
// CLIENT CACHING YES), a command that issues IDs is refused with NOCACHE: alone, queued in
// MULTI (EXEC then aborts, as rueidis's DoCache sends it), and queued after a CLIENT CACHING
// YES inside the transaction. The next command without CACHING YES is served; read-only
// commands are served under CACHING YES. COMMAND INFO flags them write / readonly.
func TestNoCache(t *testing.T) {
	s := startServer(t, serverOpts{autoCreate: true})
	noCache := func(name string) string { return "-" + noCacheReply(s.h.lookup([]byte(name))) + "\r\n" }
	runTranscript(t, s, []step{
		{"CLIENT TRACKING on OPTIN", "+OK\r\n"},
		{"CLIENT CACHING yes", "+OK\r\n"},
		{"INCR orders", noCache("incr")},
		{"INCR orders", ":1\r\n"}, // CACHING YES applied to the refused command only
		{"CLIENT CACHING yes", "+OK\r\n"},
		{"IDS.SNOWFLAKE", noCache("ids.snowflake")},
		{"CLIENT CACHING yes", "+OK\r\n"},
		{"MULTI", "+OK\r\n"},
		{"PTTL orders", "+QUEUED\r\n"},
		{"IDS.SEGMENT orders 2", noCache("ids.segment")},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"MULTI", "+OK\r\n"},
		{"CLIENT CACHING yes", "+QUEUED\r\n"},
		{"INCRBY orders 5", "+QUEUED\r\n"},
		{"EXEC", "*2\r\n+OK\r\n" + noCache("incrby")},
		{"INCR orders", ":2\r\n"},
		{"CLIENT CACHING yes", "+OK\r\n"},
		{"IDS.DECODE 2127163742994038805", ""}, // read-only: served
		{"INCR orders", ":3\r\n"},
	})
	c := s.client(t, 2, "")
	for name, flag := range map[string]string{"incr": "write", "incrby": "write", "ids.segment": "write",
		"ids.snowflake": "write", "ids.create": "write", "ids.decode": "readonly", "pttl": "readonly"} {
		info, err := c.Do(context.Background(), "COMMAND", "INFO", name).Slice()
		if err != nil || len(info) != 1 {
			t.Fatalf("COMMAND INFO %s: %v %v", name, info, err)
		}
		flags := fmt.Sprint(info[0].([]any)[2])
		if !strings.Contains(flags, flag) {
			t.Errorf("COMMAND INFO %s: flags %s, want %s", name, flags, flag)
		}
	}
}

// TestRueidisDoCache: rueidis's default client (RESP3, client-side caching on) caches
// IDS.DECODE with DoCache (the second call is a cache hit with the same fields), and refuses
// to cache INCR: DoCache of INCR is the NOCACHE error every time, never a cached ID, and Do
// of INCR then serves the next ID.
func TestRueidisDoCache(t *testing.T) {
	s := startServer(t, serverOpts{autoCreate: true})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.addr}, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	id, err := c.Do(ctx, c.B().Arbitrary("IDS.SNOWFLAKE").Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	sid := strconv.FormatInt(id, 10)
	decode := func() rueidis.RedisResult {
		return c.DoCache(ctx, rueidis.Cacheable(c.B().Arbitrary("IDS.DECODE").Keys(sid).ReadOnly()), time.Minute)
	}
	first := decode()
	m1, err := first.AsMap()
	if err != nil {
		t.Fatalf("DoCache IDS.DECODE: %v", err)
	}
	second := decode()
	m2, err := second.AsMap()
	if err != nil || !second.IsCacheHit() {
		t.Fatalf("second DoCache IDS.DECODE: cache hit %v, %v; want a hit", second.IsCacheHit(), err)
	}
	wm1, wm2 := m1["worker_id"], m2["worker_id"]
	w1, _ := wm1.AsInt64()
	w2, _ := wm2.AsInt64()
	if w1 != 7 || w2 != 7 {
		t.Errorf("IDS.DECODE worker_id: got %d then %d, want 7 (the test server's)", w1, w2)
	}

	var last int64
	for i := range 3 {
		r := c.DoCache(ctx, rueidis.Cacheable(c.B().Arbitrary("INCR").Keys("orders").Build()), time.Minute)
		if v, err := r.AsInt64(); err == nil || r.IsCacheHit() || !strings.HasPrefix(err.Error(), "NOCACHE") {
			t.Fatalf("DoCache INCR #%d: got %d, %v (cache hit %v); want NOCACHE", i, v, err, r.IsCacheHit())
		}
		v, err := c.Do(ctx, c.B().Incr().Key("orders").Build()).AsInt64()
		if err != nil || v <= last {
			t.Fatalf("Do INCR after DoCache: got %d, %v; want more than %d", v, err, last)
		}
		last = v
	}
	// go-redis (no tracking) is unaffected.
	g := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: 3})
	defer g.Close()
	if v, err := g.Incr(ctx, "orders").Result(); err != nil || v <= last {
		t.Errorf("go-redis INCR: got %d, %v; want more than %d", v, err, last)
	}
}
