package handlers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/segtest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// TestAuthFailuresDisconnect: a client is answered WRONGPASS for each of its first
// AuthMaxFailures wrong passwords, then disconnected; every failure is counted in INFO and
// /metrics; a correct password still works afterwards on a new connection.
func TestAuthFailuresDisconnect(t *testing.T) {
	s := startServer(t, serverOpts{requirePass: "s3cret"})
	conn := s.raw(t)
	fmt.Fprint(conn, strings.Repeat("AUTH guess\r\n", 50)+strings.Repeat("HELLO 3 AUTH default guess\r\n", 50))
	got, _ := io.ReadAll(conn)
	want := strings.Repeat("-WRONGPASS invalid username-password pair or user is disabled.\r\n", DefaultAuthMaxFailures)
	if string(got) != want {
		t.Errorf("100 wrong AUTHs in a pipeline: got %q, want %d WRONGPASS then close", got, DefaultAuthMaxFailures)
	}
	// HELLO AUTH and a wrong user name count too.
	conn = s.raw(t)
	fmt.Fprint(conn, strings.Repeat("HELLO 3 AUTH nobody s3cret\r\n", 20))
	if got, _ := io.ReadAll(conn); strings.Count(string(got), "WRONGPASS") != DefaultAuthMaxFailures {
		t.Errorf("wrong user names: got %q, want %d WRONGPASS then close", got, DefaultAuthMaxFailures)
	}
	ctx := context.Background()
	ok := s.client(t, 2, "s3cret")
	info, err := ok.Info(ctx, "stats").Result()
	if err != nil || !strings.Contains(info, fmt.Sprintf("acl_access_denied_auth:%d\r\n", 2*DefaultAuthMaxFailures)) {
		t.Errorf("INFO stats: got %q, %v; want acl_access_denied_auth:%d", info, err, 2*DefaultAuthMaxFailures)
	}
	hs := httpServer(t, s.h)
	if _, _, body := testkit.Fetch(t, hs, http.MethodGet, "/metrics"); !strings.Contains(body, fmt.Sprintf(`leafd_auth_failures_total{port="resp"} %d`, 2*DefaultAuthMaxFailures)) {
		t.Errorf("metrics: no leafd_auth_failures_total{port=\"resp\"} %d", 2*DefaultAuthMaxFailures)
	}
}

// TestAuthFailuresPaced: failures of all connections pass at AuthFailRate per second after
// a burst; beyond a second of waiting the client is disconnected at once. The clock stands
// still, so the waits are exactly the pacing.
func TestAuthFailuresPaced(t *testing.T) {
	var mu sync.Mutex
	var waits []time.Duration
	now := time.Unix(1e9, 0)
	s := startServer(t, serverOpts{requirePass: "s3cret", config: func(c *Config) {
		c.AuthFailRate, c.AuthFailBurst = 10, 2
		c.Now = func() time.Time { return now }
		c.Sleep = func(d time.Duration) { mu.Lock(); waits = append(waits, d); mu.Unlock() }
	}})
	var replies []string
	for i := 0; i < 14; i++ {
		conn := s.raw(t)
		fmt.Fprint(conn, "AUTH guess\r\nQUIT\r\n")
		got, _ := io.ReadAll(bufio.NewReader(conn))
		replies = append(replies, string(got))
		_ = conn.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	// Burst 2 at 10/s: failures 1-2 do not wait, 3 waits 100 ms, ... 12 waits 1 s; 13 and 14
	// would wait longer and are disconnected at once instead.
	var want []time.Duration
	for i := 1; i <= 10; i++ {
		want = append(want, time.Duration(i)*100*time.Millisecond)
	}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits: got %v, want %v", waits, want)
	}
	for i, r := range replies {
		closed := !strings.Contains(r, "+OK")
		if wantClosed := i >= 12; closed != wantClosed || !strings.HasPrefix(r, "-WRONGPASS") {
			t.Errorf("connection %d: got %q, want WRONGPASS and closed=%v", i+1, r, wantClosed)
		}
	}
}

// TestEchoedControlBytes: a client's control bytes come back escaped in error replies.
func TestEchoedControlBytes(t *testing.T) {
	s := startServer(t, serverOpts{})
	conn := s.raw(t)
	fmt.Fprint(conn, "*2\r\n$5\r\nX\x00\x1b[m\r\n$3\r\na\x07b\r\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	want := `-ERR unknown command 'X\x00\x1b[m', with args beginning with: 'a\x07b' ` + "\r\n"
	if err != nil || line != want {
		t.Errorf("got %q, %v; want %q", line, err, want)
	}
}

// addrStore grants one range of 10, then fails every call with an error naming the
// database's address, as the MySQL driver's errors do. The tag is then held (its first load
// worked) and its refills fail.
type addrStore struct {
	segtest.DownStore
	granted *atomic.Bool
}

var errAddr = fmt.Errorf("allocate: dial tcp 10.9.8.7:3306: connect: connection refused")

func (s addrStore) Allocate(context.Context, string, int64) (segment.Alloc, error) {
	if s.granted.CompareAndSwap(false, true) {
		return segment.Alloc{MaxID: 11, Step: 10}, nil
	}
	return segment.Alloc{}, errAddr
}

// refusedWords is what the replies and pages say of a refused connection to the store.
const refusedWords = "the store refused the connection: it is not running, or not listening at its address (details in the server log)"

// TestStoreErrorsRedacted: IDS.INFO's last_error and /status say what failed in words; the
// address stays in the log.
func TestStoreErrorsRedacted(t *testing.T) {
	cfg := segment.DefaultConfig()
	cfg.AutoCreate = true
	cfg.WaitTimeout = 50 * time.Millisecond
	seg, err := segment.New(cfg, addrStore{granted: new(atomic.Bool)}, segtest.NoMarks{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = seg.Close() })
	// Drain the one range; the refills fail, so the last Next fails too.
	var nextErr error
	for i := 0; i < 11 && nextErr == nil; i++ {
		_, nextErr = seg.Next("t")
	}
	if nextErr == nil {
		t.Fatal("Next past the only range on a store that is down: no error")
	}
	in, err := seg.Info("t")
	if err != nil || !strings.Contains(in.LastError, "10.9.8.7") {
		t.Fatalf("the core keeps the raw error: got %q, %v", in.LastError, err)
	}
	h := New(Config{}, seg, nil, zap.NewNop())
	hs := httpServer(t, h)
	_, _, body := testkit.Fetch(t, hs, http.MethodGet, "/status.json")
	if strings.Contains(body, "10.9.8.7") || !strings.Contains(body, refusedWords) {
		t.Errorf("/status.json shows %q, want the words only", body)
	}
	srv, err := resp.NewServer(resp.DefaultConfig(), h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := testkit.ServeLocal(t, srv)
	defer stop()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
	defer c.Close()
	info, err := c.Do(context.Background(), "IDS.INFO", "t").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var lastError any
	for i := 0; i+1 < len(info); i += 2 {
		if info[i] == "last_error" {
			lastError = info[i+1]
		}
	}
	if lastError != refusedWords {
		t.Errorf("IDS.INFO last_error: got %q, want the words only", lastError)
	}
}

// TestExecOutputLimit: a transaction's replies are one reply, so a transaction whose replies
// pass --max-output-buffer closes the connection — and stops running its queued commands
// there instead of building the whole reply in memory.
func TestExecOutputLimit(t *testing.T) {
	s := startServer(t, serverOpts{autoCreate: true})
	conn := s.raw(t)
	const n = 3000 // each reply about 1.1 KB: 3.3 MB in all, over the 1 MiB default
	fmt.Fprint(conn, "MULTI\r\n"+strings.Repeat("IDS.SEGMENT t 100\r\n", n)+"EXEC\r\n")
	got, _ := io.ReadAll(conn)
	if want := "+OK\r\n" + strings.Repeat("+QUEUED\r\n", n); string(got) != want {
		t.Errorf("got %d bytes ending %q, want OK, %d QUEUED, then close", len(got), got[max(0, len(got)-40):], n)
	}
	if st := s.srv.Stats(); st.OutputLimitClosed != 1 {
		t.Errorf("OutputLimitClosed: got %d, want 1", st.OutputLimitClosed)
	}
	next, err := s.client(t, 2, "").Incr(context.Background(), "t").Result()
	if err != nil || next > n*100/2 {
		t.Errorf("INCR after the transaction: got %d, %v; want well below %d (EXEC stopped at the limit)", next, err, n*100)
	}
}
