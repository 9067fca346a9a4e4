package admin

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/snowflake"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testServer is an in-process leafd front end whose admin port the tests serve: resp server,
// handlers, a segment generator on an embedded store in a temp dir, and a snowflake
// generator on a file worker source (worker id 7).
type testServer struct {
	addr string
	h    *handlers.Handler
	srv  *resp.Server
	seg  *segment.Generator
	snow *snowflake.Generator
	log  *zap.Logger
}

type serverOpts struct {
	autoCreate bool
	config     func(*handlers.Config) // adjusts the handler's configuration
}

func startServer(t testing.TB, o serverOpts) *testServer {
	t.Helper()
	dir := t.TempDir()
	log := zap.NewNop()
	store, err := boltstore.OpenBolt(filepath.Join(dir, "leafd.db"), boltstore.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scfg := segment.DefaultConfig()
	scfg.AutoCreate = o.autoCreate
	scfg.WaitTimeout = 2 * time.Second
	seg, err := segment.New(scfg, store, store, log)
	if err != nil {
		t.Fatal(err)
	}
	src, err := snowflake.NewFileSource(dir, 7)
	if err != nil {
		t.Fatal(err)
	}
	snow, err := snowflake.New(snowflake.DefaultConfig(), src, log)
	if err != nil {
		t.Fatal(err)
	}
	hcfg := handlers.Config{MaxBatch: 100, Version: "test", StoreName: "embedded",
		ConfigValues: map[string]string{"save": "", "appendonly": "no", "maxclients": "10"}}
	if o.config != nil {
		o.config(&hcfg)
	}
	h := handlers.New(hcfg, seg, snow, log)
	srv, err := resp.NewServer(resp.DefaultConfig(), h, log)
	if err != nil {
		t.Fatal(err)
	}
	h.SetServer(srv)
	addr, _ := testkit.ServeLocal(t, srv, seg.Close, snow.Close, src.Close, store.Close)
	return &testServer{addr: addr, h: h, srv: srv, seg: seg, snow: snow, log: log}
}

func (s *testServer) client(t testing.TB, proto int, pass string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: proto, Password: pass, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
