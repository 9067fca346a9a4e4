package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/snowflake"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// startLeafd starts an in-process leafd front end (resp server, handlers, a segment
// generator on store, a snowflake generator with its own worker id) and returns its address.
// Several instances may share one store, as leafd instances share a MySQL database.
func startLeafd(t *testing.T, store *boltstore.BoltStore, workerID int64) string {
	t.Helper()
	log := zap.NewNop()
	scfg := segment.DefaultConfig()
	scfg.AutoCreate = true
	scfg.WaitTimeout = 2 * time.Second
	seg, err := segment.New(scfg, store, store, log)
	if err != nil {
		t.Fatal(err)
	}
	src, err := snowflake.NewFileSource(t.TempDir(), workerID)
	if err != nil {
		t.Fatal(err)
	}
	snow, err := snowflake.New(snowflake.DefaultConfig(), src, log)
	if err != nil {
		t.Fatal(err)
	}
	h := handlers.New(handlers.Config{MaxBatch: 100, Version: "test", StoreName: "embedded"}, seg, snow, log)
	srv, err := resp.NewServer(resp.DefaultConfig(), h, log)
	if err != nil {
		t.Fatal(err)
	}
	h.SetServer(srv)
	addr, _ := testkit.ServeLocal(t, srv, seg.Close, snow.Close, src.Close)
	return addr
}

func openStore(t *testing.T) *boltstore.BoltStore {
	t.Helper()
	store, err := boltstore.OpenBolt(filepath.Join(t.TempDir(), "leafd.db"), boltstore.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// TestRunAgainstLeafd runs the generator with Check on against in-process servers: one, and
// two sharing a store (segment IDs unique across both, increasing per connection).
func TestRunAgainstLeafd(t *testing.T) {
	store := openStore(t)
	one := startLeafd(t, store, 7)
	two := startLeafd(t, store, 8)
	tests := []struct {
		name    string
		cfg     Config
		wantIDs int64 // per measured request
	}{
		{name: "INCR unpipelined", cfg: Config{Addrs: []string{one}, Clients: 4, Requests: 3000}, wantIDs: 1},
		{name: "INCR pipelined, count not a multiple of the depth", cfg: Config{Addrs: []string{one}, Clients: 5, Pipeline: 16, Requests: 30001}, wantIDs: 1},
		{name: "INCR two servers one store", cfg: Config{Addrs: []string{one, two}, Clients: 6, Pipeline: 8, Requests: 20000, Tag: "shared"}, wantIDs: 1},
		{name: "IDS.SEGMENT batches", cfg: Config{Addrs: []string{one}, Clients: 3, Pipeline: 4, Requests: 2000, Command: CmdSegment, Batch: 50}, wantIDs: 50},
		{name: "IDS.SEGMENT two servers", cfg: Config{Addrs: []string{one, two}, Clients: 4, Pipeline: 4, Requests: 2000, Command: CmdSegment, Batch: 7, Tag: "seg2"}, wantIDs: 7},
		{name: "IDS.SNOWFLAKE", cfg: Config{Addrs: []string{one, two}, Clients: 4, Pipeline: 8, Requests: 8000, Command: CmdSnowflake}, wantIDs: 1},
		{name: "IDS.SNOWFLAKE batches", cfg: Config{Addrs: []string{one}, Clients: 2, Pipeline: 2, Requests: 400, Command: CmdSnowflake, Batch: 100}, wantIDs: 100},
		{name: "INCRBY blocks", cfg: Config{Addrs: []string{one}, Clients: 3, Pipeline: 4, Requests: 600, Command: CmdIncrBy, Batch: 100, Tag: "blocks"}, wantIDs: 100},
		{name: "IDS.SEGMENT batches, go-redis", cfg: Config{Addrs: []string{one}, Clients: 3, Pipeline: 4, Requests: 2001, Command: CmdSegment, Batch: 50, Client: ClientGoRedis}, wantIDs: 50},
		{name: "INCR, go-redis", cfg: Config{Addrs: []string{one, two}, Clients: 4, Pipeline: 8, Requests: 5000, Tag: "gr", Client: ClientGoRedis}, wantIDs: 1},
		{name: "IDS.SNOWFLAKE batches, go-redis", cfg: Config{Addrs: []string{one}, Clients: 2, Pipeline: 2, Requests: 400, Command: CmdSnowflake, Batch: 100, Client: ClientGoRedis}, wantIDs: 100},
		{name: "duration with warm-up", cfg: Config{Addrs: []string{one}, Clients: 2, Pipeline: 4, Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Check = true
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := res.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + out.String())
			if !res.OK() {
				t.Fatalf("run not clean: errors %d (%s), connection errors %v, check %+v", res.Errors, res.FirstError, res.ConnErrors, res.Check)
			}
			if cfg.Requests > 0 && res.Requests != cfg.Requests {
				t.Errorf("got %d requests, want %d", res.Requests, cfg.Requests)
			}
			if cfg.Requests == 0 && (res.Requests == 0 || res.Seconds < cfg.Duration.Seconds()) {
				t.Errorf("got %d requests in %.3fs, want some in at least %v", res.Requests, res.Seconds, cfg.Duration)
			}
			if tt.wantIDs > 0 && res.IDs != res.Requests*tt.wantIDs {
				t.Errorf("got %d IDs for %d requests, want %d each", res.IDs, res.Requests, tt.wantIDs)
			}
			if cfg.Warmup == 0 && res.Check.IDs*idsIn(cfg, []int64{0}) != res.IDs {
				t.Errorf("check saw %d IDs, the counters %d", res.Check.IDs, res.IDs)
			}
			if got := res.Histogram().Count(); got != uint64(res.Requests) {
				t.Errorf("histogram holds %d latencies, want one per request (%d)", got, res.Requests)
			}
			if l := res.Latency; !(l.Min <= l.P50 && l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) || l.Max <= 0 {
				t.Errorf("latency quantiles out of order: %+v", l)
			}
		})
	}
}

// TestRunManyTags: with Tags > 1 every tag is primed before the measurement and the
// requests go round-robin over the tags, so each tag gets its share.
func TestRunManyTags(t *testing.T) {
	addr := startLeafd(t, openStore(t), 7)
	const tags, clients, pipeline = 40, 3, 4
	res, err := Run(context.Background(), Config{Addrs: []string{addr}, Clients: clients, Pipeline: pipeline, Requests: 1200, Tags: tags, Tag: "rr"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.Requests != 1200 {
		t.Fatalf("run not clean: %d requests, errors %d (%s), connection errors %v", res.Requests, res.Errors, res.FirstError, res.ConnErrors)
	}
	// Each tag's counter now holds 1 (prime) + its share of the run: INCR it once more.
	rc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	var sum, lo, hi int64 = 0, 1 << 62, 0
	for i := range tags {
		v, err := rc.Incr(context.Background(), fmt.Sprintf("rr:%d", i)).Result()
		if err != nil {
			t.Fatal(err)
		}
		share := v - 2
		sum += share
		lo, hi = min(lo, share), max(hi, share)
	}
	// Round-robin: every connection spreads its requests evenly, so tags differ by at most
	// one request per connection.
	if sum != 1200 || hi-lo > clients || lo < 1 {
		t.Errorf("tags got %d requests in all, %d to %d each; want 1200, within %d of each other", sum, lo, hi, clients)
	}
	_ = pipeline
}

// TestRunReportsErrorReplies: error replies are counted, not fatal, and make the run not OK.
func TestRunReportsErrorReplies(t *testing.T) {
	addr := startLeafd(t, openStore(t), 7)
	res, err := Run(context.Background(), Config{Addrs: []string{addr}, Clients: 2, Pipeline: 3, Requests: 30, Command: CmdSegment, Batch: 101})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 30 || !strings.HasPrefix(res.FirstError, "LIMIT") || res.OK() {
		t.Errorf("got %d errors (first %q), OK %v; want 30 LIMIT errors, not OK", res.Errors, res.FirstError, res.OK())
	}
}

// fakeServer answers every command with the next value of replies (cycling), to feed the
// check bad IDs.
func fakeServer(t *testing.T, replies ...int64) string {
	t.Helper()
	i := 0
	srv, err := resp.NewServer(resp.DefaultConfig(), resp.HandlerFunc(func(c *resp.Conn, args [][]byte) {
		c.WriteInt(replies[i%len(replies)])
		i++
	}), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testkit.ServeLocal(t, srv)
	return addr
}

func TestCheckCatchesBadIDs(t *testing.T) {
	// One connection, so the handler's counter is not shared: 1 2 3 2 1 ...
	addr := fakeServer(t, 1, 2, 3, 2)
	res, err := Run(context.Background(), Config{Addrs: []string{addr}, Clients: 1, Pipeline: 4, Requests: 8, Check: true})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Check
	if c.OK || res.OK() {
		t.Fatalf("check passed on 1 2 3 2 1 2 3 2: %+v", c)
	}
	// Sorted: 1 1 2 2 2 2 3 3 → 5 repeats; not increasing: 2 after 3, 1 after 2, 2 after 3.
	if c.Duplicates != 5 || c.NonIncreasing != 3 || c.IDs != 8 {
		t.Errorf("got %d duplicates, %d non-increasing of %d IDs, want 5, 3 of 8", c.Duplicates, c.NonIncreasing, c.IDs)
	}
	if len(c.DuplicateExamples) != 3 || !strings.HasPrefix(c.NonIncreasingExample, "2 after 3 on ") {
		t.Errorf("got examples %v and %q", c.DuplicateExamples, c.NonIncreasingExample)
	}
}

func TestRunCancel(t *testing.T) {
	addr := startLeafd(t, openStore(t), 7)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, Config{Addrs: []string{addr}, Clients: 4, Duration: time.Hour})
	if err != context.DeadlineExceeded {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Run returned %v after the cancel, want promptly", el)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{name: "defaults", cfg: Config{}, ok: true},
		{name: "unknown command", cfg: Config{Command: "get"}},
		{name: "INCR with a batch", cfg: Config{Batch: 5}},
		{name: "tag with a space", cfg: Config{Tag: "a b"}},
		{name: "empty address", cfg: Config{Addrs: []string{"127.0.0.1:1", ""}}},
		{name: "segment batch", cfg: Config{Command: CmdSegment, Batch: 100}, ok: true},
		{name: "many tags", cfg: Config{Tags: 1000}, ok: true},
		{name: "many tags, check", cfg: Config{Tags: 1000, Check: true}},
		{name: "many tags, snowflake", cfg: Config{Tags: 1000, Command: CmdSnowflake}},
		{name: "many tags, go-redis", cfg: Config{Tags: 1000, Client: ClientGoRedis}},
		{name: "unknown client", cfg: Config{Client: "hiredis"}},
		{name: "go-redis", cfg: Config{Client: ClientGoRedis, Command: CmdSegment, Batch: 1000}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestRunDialError(t *testing.T) {
	addr := fakeServer(t, 1)
	_, err := Run(context.Background(), Config{Addrs: []string{addr, "127.0.0.1:1"}, Clients: 2, Requests: 1})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("got %v, want a dial error naming 127.0.0.1:1", err)
	}
}
