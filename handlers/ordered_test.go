package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/segment/segtest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// memLeases is the lease store of package ordered in memory, as MySQLLeases behaves on one
// database server; the ordered tags are those of the shared bolt store.
type memLeases struct {
	clk  *clock.Fake
	cat  *boltstore.BoltStore
	mu   sync.Mutex
	rows map[string]*ordered.Row
}

func (m *memLeases) IsOrdered(ctx context.Context, tag string) (bool, error) {
	return m.cat.IsOrdered(ctx, tag)
}

func (m *memLeases) List(ctx context.Context) ([]string, error) { return m.cat.List(ctx) }

func (m *memLeases) Read(ctx context.Context, tag string) (ordered.Row, error) {
	ok, err := m.cat.IsOrdered(ctx, tag)
	if err != nil {
		return ordered.Row{}, err
	}
	if !ok {
		return ordered.Row{}, ordered.ErrNotOrdered
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rows[tag]
	if r == nil {
		r = &ordered.Row{Server: 1, At: 1}
		m.rows[tag] = r
	}
	return *r, nil
}

func (m *memLeases) Write(ctx context.Context, tag string, old ordered.Row, holder string, take bool, length time.Duration) (ordered.Row, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rows[tag]
	if r == nil || r.Version != old.Version || r.Server != old.Server || old.At != 1 {
		return ordered.Row{}, false, nil
	}
	*r = ordered.Row{Holder: holder, Epoch: r.Epoch, Version: r.Version + 1, Server: 1, At: 1, Longest: max(r.Longest, length)}
	if take {
		r.Epoch++
	}
	return *r, true, nil
}

// gatedStore holds Allocate calls back while gate is set (a slow store): a plain Store of
// Allocate, Tags and Create around Store (StoreBase: nothing else).
type gatedStore struct {
	segtest.StoreBase
	Store   segment.Store
	mu      sync.Mutex
	gate    chan struct{} // nil: pass
	skip    int           // calls that pass before the gate applies
	entered chan struct{} // receives one value per held call
}

func (s *gatedStore) Allocate(ctx context.Context, tag string, step int64) (segment.Alloc, error) {
	s.mu.Lock()
	g := s.gate
	if g != nil && s.skip > 0 {
		s.skip--
		g = nil
	}
	s.mu.Unlock()
	if g != nil {
		s.entered <- struct{}{}
		<-g
	}
	return s.Store.Allocate(ctx, tag, step)
}

func (s *gatedStore) Tags(ctx context.Context) ([]string, error) { return s.Store.Tags(ctx) }
func (s *gatedStore) Create(ctx context.Context, t segment.Tag) error {
	return s.Store.Create(ctx, t)
}

// ordInstance is one in-process leafd instance serving ordered tags.
type ordInstance struct {
	addr  string
	h     *Handler
	seg   *segment.Generator
	mgr   *ordered.Manager
	store *gatedStore
	stop  func()
}

// ordCluster is instances sharing one bolt store (the shared database) and one lease store
// on a fake clock; the tests run the lease calls (Manager.Round) themselves.
type ordCluster struct {
	clk    *clock.Fake
	bolt   *boltstore.BoltStore
	leases *memLeases
}

func newOrdCluster(t *testing.T) *ordCluster {
	t.Helper()
	b, err := boltstore.OpenBolt(filepath.Join(t.TempDir(), "shared.db"), boltstore.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &ordCluster{clk: clk, bolt: b, leases: &memLeases{clk: clk, cat: b, rows: map[string]*ordered.Row{}}}
}

type ordOpts struct {
	store   segment.Store         // default the cluster's bolt store
	leases  ordered.Store         // default the cluster's memLeases
	catalog ordered.Catalog       // default the cluster's memLeases
	clk     clock.Clock           // default the cluster's fake clock
	manual  bool                  // Manager.Round by the test
	length  time.Duration         // lease (default 3s)
	dropped func(tag string)      // called after the manager's drop (tests)
	scfg    func(*segment.Config) // adjusts the segment config
	holder  string                // advertised address (default the listen address)
	loops   int                   // resp event loops (default resp's)
	model   string                // resp server model (default resp's)
}

func (cl *ordCluster) start(t *testing.T, o ordOpts) *ordInstance {
	t.Helper()
	dir := t.TempDir()
	// The instance advertises its address before its server exists: the listener is opened
	// first and handed to the server (resp.Server.ListenOn).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	addr := ln.Addr().String()
	if o.store == nil {
		o.store = cl.bolt
	}
	if o.leases == nil {
		o.leases, o.catalog = cl.leases, cl.leases
	}
	if o.clk == nil {
		o.clk = cl.clk
	}
	if o.length == 0 {
		o.length = 3 * time.Second
	}
	log := zap.NewNop()
	holder := addr
	if o.holder != "" {
		holder = o.holder
	}
	mgr, err := ordered.NewManager(ordered.ManagerConfig{Holder: holder, Length: o.length, Manual: o.manual, Clock: o.clk, Log: log}, o.catalog, o.leases)
	if err != nil {
		t.Fatal(err)
	}
	fwd := ordered.NewForwarder(ordered.ForwarderConfig{Timeout: time.Second, Backoff: time.Millisecond})
	marks, err := boltstore.OpenMarkFile(filepath.Join(dir, "marks.db"))
	if err != nil {
		t.Fatal(err)
	}
	gs := &gatedStore{Store: o.store, entered: make(chan struct{}, 16)}
	scfg := segment.DefaultConfig()
	scfg.WaitTimeout = 5 * time.Second
	scfg.NoWarmStart = true
	scfg.Admit = mgr.Admit
	if o.scfg != nil {
		o.scfg(&scfg)
	}
	seg, err := segment.New(scfg, gs, marks, log)
	if err != nil {
		t.Fatal(err)
	}
	mgr.Start(context.Background(), func(tag string) {
		seg.Retire(tag)
		if o.dropped != nil {
			o.dropped(tag)
		}
	})
	h := New(Config{MaxBatch: 100, Version: "test", StoreName: "mysql", Ordered: mgr, Forward: fwd}, seg, nil, log)
	rcfg := resp.DefaultConfig()
	if o.loops > 0 {
		rcfg.Loops = o.loops
	}
	if o.model != "" {
		rcfg.Model = o.model
	}
	srv, err := resp.NewServer(rcfg, h, log)
	if err != nil {
		t.Fatal(err)
	}
	h.SetServer(srv)
	srv.ListenOn(ln)
	stop := testkit.Serve(t, srv, fwd.Close, mgr.Close, seg.Close, marks.Close)
	return &ordInstance{addr: addr, h: h, seg: seg, mgr: mgr, store: gs, stop: stop}
}

func (in *ordInstance) client(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: in.addr, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (in *ordInstance) round(t *testing.T) {
	t.Helper()
	in.mgr.Round(context.Background())
}

// incr is INCR tag on c: the ID, or the error reply.
func incr(t *testing.T, c *redis.Client, tag string) (int64, error) {
	t.Helper()
	return c.Incr(context.Background(), tag).Result()
}

func mustIncr(t *testing.T, c *redis.Client, tag string) int64 {
	t.Helper()
	id, err := incr(t, c, tag)
	if err != nil {
		t.Fatalf("INCR %s: %v", tag, err)
	}
	return id
}

func wantCode(t *testing.T, what string, id int64, err error, code, text string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got ID %d, want a %s error", what, id, code)
	}
	if !strings.HasPrefix(err.Error(), code+" ") || !strings.Contains(err.Error(), text) {
		t.Fatalf("%s: got %q, want %s ... %q", what, err, code, text)
	}
}

// twoOrdered starts leader a and follower b of ordered tag seq (created on a, its lease taken
// by a, seen by b).
func twoOrdered(t *testing.T) (*ordCluster, *ordInstance, *ordInstance) {
	t.Helper()
	return twoOrderedWith(t, ordOpts{manual: true})
}

// twoOrderedWith is twoOrdered with the follower started with ob.
func twoOrderedWith(t *testing.T, ob ordOpts) (*ordCluster, *ordInstance, *ordInstance) {
	t.Helper()
	cl := newOrdCluster(t)
	a := cl.start(t, ordOpts{manual: true})
	b := cl.start(t, ob)
	ctx := context.Background()
	if err := a.client(t).Do(ctx, "IDS.CREATE", "seq", "ORDERED").Err(); err != nil {
		t.Fatal(err)
	}
	a.round(t)
	if _, ok := a.mgr.Lookup("seq").Serving(); !ok {
		t.Fatal("the creating instance is not the leader after its first lease call")
	}
	// b learns of the tag at its first request (the segment core's Admit), and answers
	// TRYAGAIN until its own first lease call tells it the leader.
	id, err := incr(t, b.client(t), "seq")
	wantCode(t, "b's first INCR", id, err, "TRYAGAIN", "has no leader now")
	b.round(t)
	return cl, a, b
}

// TestOrderedFollowerForwards: INCR, INCRBY, IDS.SEGMENT and IDS.NEXT of an ordered tag on
// the follower return the leader's next IDs, one sequence across both instances, pipelined
// and concurrent requests included; IDS.INFO shows the leader.
func TestOrderedFollowerForwards(t *testing.T) {
	_, a, b := twoOrdered(t)
	ctx := context.Background()
	ca, cb := a.client(t), b.client(t)
	want := mustIncr(t, ca, "seq") + 1
	for i := range 10 {
		c := ca
		if i%2 == 0 {
			c = cb
		}
		if got := mustIncr(t, c, "seq"); got != want {
			t.Fatalf("INCR %d: got %d, want %d (one sequence across the instances)", i, got, want)
		}
		want++
	}
	if got, err := cb.IncrBy(ctx, "seq", 5).Result(); err != nil || got != want+4 {
		t.Fatalf("INCRBY on the follower: %d %v, want %d", got, err, want+4)
	}
	want += 5
	seg, err := cb.Do(ctx, "IDS.SEGMENT", "seq", "3").Int64Slice()
	if err != nil || len(seg) != 3 || seg[0] != want || seg[2] != want+2 {
		t.Fatalf("IDS.SEGMENT on the follower: %v %v, want from %d", seg, err, want)
	}
	want += 3
	if got, err := cb.Do(ctx, "IDS.NEXT", "seq").Text(); err != nil || got != fmt.Sprint(want) {
		t.Fatalf("IDS.NEXT on the follower: %q %v, want %d", got, err, want)
	}
	want++

	// A pipeline on the follower: relayed in order.
	p := cb.Pipeline()
	cmds := make([]*redis.IntCmd, 50)
	for i := range cmds {
		cmds[i] = p.Incr(ctx, "seq")
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		if c.Val() != want+int64(i) {
			t.Fatalf("pipelined INCR %d: got %d, want %d", i, c.Val(), want+int64(i))
		}
	}
	want += int64(len(cmds))

	// Concurrent clients on both: every ID once, each client's increasing.
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		in := a
		if i%2 == 1 {
			in = b
		}
		c := redis.NewClient(&redis.Options{Addr: in.addr, MaxRetries: -1, PoolSize: 1})
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for range 50 {
				id, err := c.Incr(ctx, "seq").Result()
				if err != nil || id <= last {
					errs <- fmt.Errorf("got %d, %v after %d", id, err, last)
					return
				}
				last = id
				mu.Lock()
				dup := seen[id]
				seen[id] = true
				mu.Unlock()
				if dup {
					errs <- fmt.Errorf("ID %d twice", id)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	info, err := cb.Do(ctx, "IDS.INFO", "seq").Slice()
	if err != nil {
		t.Fatal(err)
	}
	s := fmt.Sprint(info)
	if !strings.Contains(s, "ordered 1") || !strings.Contains(s, "leader "+a.addr) || !strings.Contains(s, "leader_here 0") {
		t.Fatalf("IDS.INFO on the follower: %s", s)
	}
	if n := b.mgr.Forwarded.Load(); n < 60 {
		t.Fatalf("forwarded %d requests, want at least 60", n)
	}
	// /status.json and the metrics show the forwarding and the leader.
	hs := httpServer(t, b.h)
	_, _, body := testkit.Fetch(t, hs, http.MethodGet, "/status.json")
	var rep struct { // /status.json's "ordered" (package admin)
		Ordered *struct {
			Forwarded       int64 `json:"forwarded"`
			TryAgain        int64 `json:"tryagain"`
			ForwardWrites   int64 `json:"forward_writes"`
			ForwardRequests int64 `json:"forward_requests"`
			Tags            []struct {
				Leader     string `json:"leader"`
				LeaderHere bool   `json:"leader_here"`
			} `json:"tags"`
		} `json:"ordered"`
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if o := rep.Ordered; o == nil || o.Forwarded < 60 || len(o.Tags) != 1 || o.Tags[0].Leader != a.addr || o.Tags[0].LeaderHere || o.TryAgain < 1 ||
		o.ForwardRequests < 60 || o.ForwardWrites >= o.ForwardRequests {
		t.Fatalf("status.json ordered: %+v", rep.Ordered)
	}
	_, _, metrics := testkit.Fetch(t, hs, http.MethodGet, "/metrics")
	for _, want := range []string{`leafd_ordered_forwarded_total{tag="seq"}`, `leafd_ordered_leader{leader="` + a.addr + `",tag="seq"} 1`, "leafd_ordered_tryagain_total 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics: no %s", want)
		}
	}
}

// TestOrderedLapsedLeaseNoID (fence: the gate before the take). A leader whose lease ran out
// (no renewal) answers TRYAGAIN, never an ID; so does the follower, once the lease it saw can
// have lapsed. Mutant: Serving without lease.Valid: caught (an ID).
func TestOrderedLapsedLeaseNoID(t *testing.T) {
	cl, a, b := twoOrdered(t)
	ca, cb := a.client(t), b.client(t)
	mustIncr(t, ca, "seq")
	cl.clk.Add(2700 * time.Millisecond) // the leader's deadline: send + 3s - 0.3s margin
	id, err := incr(t, ca, "seq")
	wantCode(t, "the leader past its deadline", id, err, "TRYAGAIN", "seq")
	cl.clk.Add(301 * time.Millisecond) // the lease as b saw it runs out
	id, err = incr(t, cb, "seq")
	wantCode(t, "the follower after the lease ran out", id, err, "TRYAGAIN", "has no leader now (lease expires within 0.0s)")
}

// TestOrderedLeaseLostDuringTake (fence: the check after the take). A request that passed
// the gate and then waited for a load while the lease ran out does not send the ID it took.
// Mutant: the after-check removed: caught (an ID after the deadline).
func TestOrderedLeaseLostDuringTake(t *testing.T) {
	cl := newOrdCluster(t)
	a := cl.start(t, ordOpts{manual: true})
	ctx := context.Background()
	ca := a.client(t)
	if err := ca.Do(ctx, "IDS.CREATE", "seq", "STEP", "2", "ORDERED").Err(); err != nil {
		t.Fatal(err)
	}
	a.round(t)
	// Hold the loads after the first back: the preload of the second segment waits at the
	// store.
	a.store.mu.Lock()
	gate := make(chan struct{})
	a.store.gate, a.store.skip = gate, 1
	a.store.mu.Unlock()
	var released sync.Once
	release := func() {
		released.Do(func() {
			a.store.mu.Lock()
			a.store.gate = nil
			a.store.mu.Unlock()
			close(gate)
		})
	}
	t.Cleanup(release)
	mustIncr(t, ca, "seq") // 1; the preload starts and is held
	<-a.store.entered
	mustIncr(t, ca, "seq") // 2: the first segment is used up
	waits := a.seg.Stats().Waits
	res := make(chan error, 1)
	go func() {
		id, err := incr(t, ca, "seq")
		if err == nil {
			err = fmt.Errorf("got ID %d", id)
		}
		res <- err
	}()
	for a.seg.Stats().Waits == waits { // the request passed the gate and waits for the load
		select {
		case err := <-res:
			t.Fatalf("the third INCR did not wait for the load: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	cl.clk.Add(3 * time.Second) // the lease runs out during the wait
	release()
	err := <-res
	if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN ") {
		t.Fatalf("a take across the end of the lease: %v, want TRYAGAIN", err)
	}
}

// TestOrderedNewTermDropsSegments (fence: the new leader's start). A leader that comes back
// for a new term after another instance led the tag starts above every ID of that term: it
// dropped the segment it held from its earlier term. Mutant: no drop on NewTerm: caught (a
// lower ID than one already returned).
func TestOrderedNewTermDropsSegments(t *testing.T) {
	cl, a, b := twoOrdered(t)
	ca, cb := a.client(t), b.client(t)
	first := mustIncr(t, ca, "seq") // from a's segment [1, 1001)
	cl.clk.Add(3100 * time.Millisecond)
	b.round(t) // a's lease lapsed: b takes it (a new term)
	if _, ok := b.mgr.Lookup("seq").Serving(); !ok {
		t.Fatal("b is not the leader after a's lease lapsed")
	}
	fromB := mustIncr(t, cb, "seq")
	if fromB <= first {
		t.Fatalf("b's first ID %d is not above a's %d", fromB, first)
	}
	a.round(t) // a reads b's row: it takes it once it has seen it unchanged for a lease
	cl.clk.Add(3100 * time.Millisecond)
	a.round(t) // b's lapsed: a leads again, a new term
	if _, ok := a.mgr.Lookup("seq").Serving(); !ok {
		t.Fatal("a is not the leader after b's lease lapsed")
	}
	if got := mustIncr(t, ca, "seq"); got <= fromB {
		t.Fatalf("a's first ID of its new term is %d, not above %d returned by b before: the segment of its earlier term was served", got, fromB)
	}
}

// TestOrderedFollowerUnreachable: a follower whose leader does not answer returns an error
// (UNAVAILABLE), never an ID of its own, for every ID command, although it holds a segment
// of the tag from its own earlier term. Mutant: serving locally on a failed forward: caught.
func TestOrderedFollowerUnreachable(t *testing.T) {
	cl, a, b := twoOrdered(t)
	cb := b.client(t)
	mustIncr(t, a.client(t), "seq")
	cl.clk.Add(3100 * time.Millisecond)
	b.round(t) // b leads a term and takes a segment
	mustIncr(t, cb, "seq")
	a.round(t) // a reads b's row
	cl.clk.Add(3100 * time.Millisecond)
	a.round(t) // a leads again; b sees it
	b.round(t)
	mustIncr(t, a.client(t), "seq")
	// b holds its old term's segment, but the tag's ID commands are forwarded: a wait, off
	// the loop, unless run on it where the forwarded call suspends the connection instead
	// (Handler.serves; mutant: the forwards check removed: caught).
	if b.h.serves(nil, "seq", 1) {
		t.Error("the follower's ID commands of the ordered tag stay on the loop (forwarded on it)")
	}
	a.stop()
	ctx := context.Background()
	id, err := incr(t, cb, "seq")
	wantCode(t, "INCR", id, err, "UNAVAILABLE", "leader "+a.addr+" unreachable")
	if v, err := cb.Do(ctx, "IDS.SEGMENT", "seq", "2").Result(); err == nil || !strings.HasPrefix(err.Error(), "UNAVAILABLE ") {
		t.Fatalf("IDS.SEGMENT: %v %v", v, err)
	}
	if v, err := cb.IncrBy(ctx, "seq", 2).Result(); err == nil || !strings.HasPrefix(err.Error(), "UNAVAILABLE ") {
		t.Fatalf("INCRBY: %v %v", v, err)
	}
	if n := b.mgr.ForwardErrors.Load(); n < 3 {
		t.Fatalf("forward errors %d, want 3", n)
	}
	// A pipeline forwarded in one call: each request answered UNAVAILABLE, in its place, and
	// the connection goes on.
	cmds, _ := pipeClient(t, b.addr).Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "seq")
		p.IncrBy(ctx, "seq", 3)
		p.Ping(ctx)
		return nil
	})
	for i, c := range cmds[:2] {
		if err := c.Err(); err == nil || !strings.HasPrefix(err.Error(), "UNAVAILABLE ") {
			t.Fatalf("pipelined request %d: %v, want UNAVAILABLE", i, err)
		}
	}
	if err := cmds[2].Err(); err != nil {
		t.Fatalf("PING after the failed forwarded call: %v", err)
	}
}

// TestOrderedForwardedNotForwardedAgain: a request that came through another instance's
// forwarder to one that does not lead the tag is answered TRYAGAIN there, never forwarded
// again (two instances with stale views would bounce it). Mutant: the check removed:
// caught (an ID).
func TestOrderedForwardedNotForwardedAgain(t *testing.T) {
	_, a, b := twoOrdered(t)
	mustIncr(t, a.client(t), "seq")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: b.addr, MaxRetries: -1, PoolSize: 1,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.ClientSetName(ctx, ordered.ForwardClientName).Err()
		}})
	defer c.Close()
	id, err := c.Incr(ctx, "seq").Result()
	wantCode(t, "a forwarded request at the follower", id, err, "TRYAGAIN", "is not led by this instance now (leader: "+a.addr+")")
}

// TestOrderedCreate: ORDERED is a flag of IDS.CREATE; an existing tag is not made ORDERED;
// shapes are refused with it; the embedded store serves an ordered tag locally (one
// instance) and IDS.INFO says so.
func TestOrderedCreate(t *testing.T) {
	dir := t.TempDir()
	b, err := boltstore.OpenBolt(filepath.Join(dir, "leafd.db"), boltstore.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ordered.NewManager(ordered.ManagerConfig{Local: true}, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := segment.New(segment.DefaultConfig(), b, b, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = seg.Close(); _ = b.Close() }()
	mgr.Start(context.Background(), func(tag string) { seg.Retire(tag) })
	h := New(Config{Ordered: mgr, Version: "test"}, seg, nil, zap.NewNop())
	srv, err := resp.NewServer(resp.DefaultConfig(), h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := testkit.ServeLocal(t, srv)
	defer stop()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "plain").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []any
		want string
	}{
		{"existing tag", []any{"IDS.CREATE", "plain", "ORDERED"}, "TAGEXISTS"},
		{"with a shape", []any{"IDS.CREATE", "fmt", "FORMAT", "A{seq}", "ORDERED"}, "ERR ORDERED cannot be combined"},
	} {
		if err := c.Do(ctx, tc.args...).Err(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Fatalf("%s: got %v, want %s", tc.name, err, tc.want)
		}
	}
	if err := c.Do(ctx, "IDS.CREATE", "seq", "STEP", "10", "ordered").Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.IsOrdered(ctx, "seq"); err != nil || !ok {
		t.Fatalf("the ordered mark in the store: %v %v", ok, err)
	}
	if ok, _ := b.IsOrdered(ctx, "plain"); ok {
		t.Fatal("plain marked ordered")
	}
	for want := int64(1); want <= 25; want++ {
		if got, err := c.Incr(ctx, "seq").Result(); err != nil || got != want {
			t.Fatalf("INCR: %d %v, want %d", got, err, want)
		}
	}
	info, err := c.Do(ctx, "IDS.INFO", "seq").Slice()
	if err != nil || !strings.Contains(fmt.Sprint(info), "ordered 1") || !strings.Contains(fmt.Sprint(info), "leader_here 1") {
		t.Fatalf("IDS.INFO: %v %v", info, err)
	}
	if info, _ := c.Do(ctx, "IDS.INFO", "plain").Slice(); strings.Contains(fmt.Sprint(info), "ordered") {
		t.Fatalf("IDS.INFO of an ordinary tag: %v", info)
	}
}

// TestOrderedSameAddressNotSameHolder: two instances advertising the same address by mistake
// are two holders: only one of them leads. Mutant: the holder without its process token:
// caught (both serve).
func TestOrderedSameAddressNotSameHolder(t *testing.T) {
	cl := newOrdCluster(t)
	a := cl.start(t, ordOpts{manual: true, holder: "10.0.0.1:6380"})
	b := cl.start(t, ordOpts{manual: true, holder: "10.0.0.1:6380"})
	if err := a.client(t).Do(context.Background(), "IDS.CREATE", "seq", "ORDERED").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.mgr.Add("seq"); err != nil {
		t.Fatal(err)
	}
	a.round(t)
	b.round(t)
	_, okA := a.mgr.Lookup("seq").Serving()
	_, okB := b.mgr.Lookup("seq").Serving()
	if okA == okB {
		t.Fatalf("a serving %v, b serving %v: want exactly one leader", okA, okB)
	}
}

// TestOrderedHTTPGated (fence: Leaf's HTTP API takes the ordered gate too). Were
// /api/segment/get/{key} to call the segment core directly, an ex-leader would keep serving its
// held segments and a partitioned leader would not fence itself. The follower's HTTP answer is
// the leader's next ID (forwarded), and the leader past its deadline answers TRYAGAIN (503).
// Mutant: serveSegmentGet without the ordered route: caught (the follower's own ID, then an
// ID from the leader past its deadline).
func TestOrderedHTTPGated(t *testing.T) {
	cl, a, b := twoOrdered(t)
	ha, hb := httpServer(t, a.h), httpServer(t, b.h)
	last := mustIncr(t, a.client(t), "seq")
	status, _, body := testkit.Fetch(t, hb, "GET", "/api/segment/get/seq")
	if status != 200 || body != strconv.FormatInt(last+1, 10) {
		t.Fatalf("follower's HTTP get: %d %q, want 200 %d (the leader's next ID)", status, body, last+1)
	}
	cl.clk.Add(2700 * time.Millisecond) // the leader's deadline: send + 3s - 0.3s margin
	status, _, body = testkit.Fetch(t, ha, "GET", "/api/segment/get/seq")
	if status != 503 || !strings.Contains(body, "TRYAGAIN") {
		t.Fatalf("the leader past its deadline, HTTP get: %d %q, want 503 TRYAGAIN", status, body)
	}
}
