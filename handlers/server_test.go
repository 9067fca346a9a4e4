package handlers

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/segment/mysqlstore"
	"github.com/leafd/leafd/snowflake"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testServer is an in-process leafd front end: resp server, handlers, a segment generator on
// an embedded store in a temp dir, and a snowflake generator on a file worker source.
type testServer struct {
	addr string
	h    *Handler
	srv  *resp.Server
	seg  *segment.Generator
	snow *snowflake.Generator
	stop func() // shuts the server down and closes its files (also run at cleanup)
}

type serverOpts struct {
	requirePass   string
	maxClients    int
	idleTimeout   time.Duration
	autoCreate    bool
	disableCreate bool
	config        func(*Config) // adjusts the handler's configuration
	dir           string        // data dir (default a new temp dir); reused across restarts
	markFile      bool          // marks in <dir>/marks.db, as leafd keeps them, not in the store file
	maxOutput     int           // resp MaxOutputBuffer (default resp's)
	noWarm        bool          // segment NoWarmStart
	model         string        // resp server model (default resp's)
	loops         int           // resp event loops (default resp's)
	// wrap, when set, makes the handler the server runs (a recorder around h).
	wrap         func(h *Handler) resp.Handler
	shapes       bool   // the store keeps ID shapes (Config.Shapes)
	mysqlDSN     string // segments from this MariaDB database instead of bolt (marks in <dir>/marks.db)
	mysqlNoFence bool   // with mysqlDSN: --mysql-failover-allocs 0

	respNow func() time.Time // resp's clock (default resp's): the batches' times
	// snowConfig, when set, adjusts the snowflake generator's configuration.
	snowConfig func(*snowflake.Config)
}

func startServer(t testing.TB, o serverOpts) *testServer {
	t.Helper()
	dir := o.dir
	if dir == "" {
		dir = t.TempDir()
	}
	log := zap.NewNop()
	var store interface {
		segment.Store
		segment.Shapes
		Close() error
	}
	var err error
	if o.mysqlDSN != "" {
		mcfg := mysqlstore.DefaultMySQLConfig()
		mcfg.DSN = o.mysqlDSN
		if o.mysqlNoFence {
			mcfg.FailoverAllocs = 0
		}
		if store, err = mysqlstore.OpenMySQL(context.Background(), mcfg, log); err != nil {
			t.Fatal(err)
		}
		o.markFile = true
	} else if store, err = boltstore.OpenBolt(filepath.Join(dir, "leafd.db"), boltstore.BoltOptions{}); err != nil {
		t.Fatal(err)
	}
	scfg := segment.DefaultConfig()
	scfg.AutoCreate = o.autoCreate
	scfg.WaitTimeout = 2 * time.Second
	scfg.NoWarmStart = o.noWarm
	var marks segment.Marks
	if b, ok := store.(*boltstore.BoltStore); ok {
		marks = b
	}
	closeMarks := func() error { return nil }
	if o.markFile {
		mf, err := boltstore.OpenMarkFile(filepath.Join(dir, "marks.db"))
		if err != nil {
			t.Fatal(err)
		}
		marks, closeMarks = mf, mf.Close
	}
	seg, err := segment.New(scfg, store, marks, log)
	if err != nil {
		t.Fatal(err)
	}
	src, err := snowflake.NewFileSource(dir, 7)
	if err != nil {
		t.Fatal(err)
	}
	fcfg := snowflake.DefaultConfig()
	if o.snowConfig != nil {
		o.snowConfig(&fcfg)
	}
	snow, err := snowflake.New(fcfg, src, log)
	if err != nil {
		t.Fatal(err)
	}
	hcfg := Config{
		MaxBatch: 100, DisableCreate: o.disableCreate, Version: "test", StoreName: "embedded",
		ConfigValues: map[string]string{"save": "", "appendonly": "no", "maxclients": "10"},
	}
	if o.shapes {
		hcfg.Shapes = store
	}
	if o.config != nil {
		o.config(&hcfg)
	}
	h := New(hcfg, seg, snow, log)
	rcfg := resp.DefaultConfig()
	rcfg.RequirePass = o.requirePass
	if o.maxClients > 0 {
		rcfg.MaxClients = o.maxClients
	}
	if o.idleTimeout != 0 {
		rcfg.IdleTimeout = o.idleTimeout
	}
	if o.maxOutput != 0 {
		rcfg.MaxOutputBuffer = o.maxOutput
	}
	if o.model != "" {
		rcfg.Model = o.model
	}
	if o.loops > 0 {
		rcfg.Loops = o.loops
	}
	if o.respNow != nil {
		rcfg.Now = o.respNow
	}
	var rh resp.Handler = h
	if o.wrap != nil {
		rh = o.wrap(h)
	}
	srv, err := resp.NewServer(rcfg, rh, log)
	if err != nil {
		t.Fatal(err)
	}
	h.SetServer(srv)
	addr, stop := testkit.ServeLocal(t, srv, seg.Close, snow.Close, src.Close, closeMarks, store.Close)
	return &testServer{addr: addr, h: h, srv: srv, seg: seg, snow: snow, stop: stop}
}

func (s *testServer) client(t testing.TB, proto int, pass string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: proto, Password: pass, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// raw dials the server for byte-level tests.
func (s *testServer) raw(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}
