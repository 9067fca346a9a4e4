package handlers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/leafd/leafd/resp"
	"github.com/redis/go-redis/v9"
)

// pipeClient is a client of one connection: a pipeline goes out in one write.
func pipeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pipeClients is n pipeClients of addr.
func pipeClients(t *testing.T, n int, addr string) []*redis.Client {
	t.Helper()
	cs := make([]*redis.Client, n)
	for i := range cs {
		cs[i] = pipeClient(t, addr)
	}
	return cs
}

// pipelineIncrs sends one pipeline of n INCR tag on c and returns the replies in order.
func pipelineIncrs(ctx context.Context, c *redis.Client, tag string, n int) ([]int64, error) {
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range n {
			p.Incr(ctx, tag)
		}
		return nil
	})
	ids := make([]int64, len(cmds))
	for i, cmd := range cmds {
		ids[i] = cmd.(*redis.IntCmd).Val()
	}
	return ids, err
}

// pipelineEach runs, on every client at once, rounds pipelines of depth INCR seq and hands
// each reply, with the one before it on the same connection (0 at first), to check; the
// test fails with every error a pipeline or check returned.
func pipelineEach(t *testing.T, clients []*redis.Client, rounds, depth int, check func(c int, v, last int64) error) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	for i, c := range clients {
		wg.Go(func() {
			last := int64(0)
			for range rounds {
				ids, err := pipelineIncrs(ctx, c, "seq", depth)
				if err != nil {
					errs <- err
					return
				}
				for _, v := range ids {
					if err := check(i, v, last); err != nil {
						errs <- err
						return
					}
					last = v
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// idSet is the set of IDs seen by the clients of pipelineEach.
type idSet struct {
	mu   sync.Mutex
	seen map[int64]bool
}

// add records v and says whether it was seen before.
func (s *idSet) add(v int64) (dup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[int64]bool{}
	}
	dup = s.seen[v]
	s.seen[v] = true
	return dup
}

func (s *idSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// TestOrderedFollowerPipelineOneRoundTrip: a pipeline of INCR sent to the follower is
// forwarded in a few writes to the leader, not one per request (the Forwarder's write
// count), and its replies are the leader's next IDs in the pipeline's order.
func TestOrderedFollowerPipelineOneRoundTrip(t *testing.T) {
	_, a, b := twoOrdered(t)
	ctx := context.Background()
	cb := pipeClient(t, b.addr)
	mustIncr(t, cb, "seq") // the forwarding connection is dialed
	want := mustIncr(t, a.client(t), "seq") + 1
	const depth = 64
	for round := range 3 {
		w0, r0 := b.h.fwd.Writes(), b.h.fwd.Requests()
		ids, err := pipelineIncrs(ctx, cb, "seq", depth)
		if err != nil {
			t.Fatal(err)
		}
		for i, got := range ids {
			if got != want {
				t.Fatalf("round %d: pipelined INCR %d: got %d, want %d", round, i, got, want)
			}
			want++
		}
		w, r := b.h.fwd.Writes()-w0, b.h.fwd.Requests()-r0
		t.Logf("round %d: %d requests forwarded in %d writes", round, r, w)
		if r != depth || w > depth/8 {
			t.Fatalf("round %d: %d requests forwarded in %d writes, want %d in at most %d (a pipeline is not forwarded one request per round trip)",
				round, r, w, depth, depth/8)
		}
	}
}

// TestOrderedFollowerPipelineMixed: a pipeline mixing forwarded commands of every form with
// other commands and a transaction gets every reply in its place: what cannot join a
// forwarded call (PING, MULTI, EXEC's queue) ends it and runs as usual; nothing joins EXEC,
// whose queue is one reply.
func TestOrderedFollowerPipelineMixed(t *testing.T) {
	_, a, b := twoOrdered(t)
	ctx := context.Background()
	cb := pipeClient(t, b.addr)
	mustIncr(t, cb, "seq")
	n := mustIncr(t, a.client(t), "seq") + 1
	var incr1, incrBy, incr2, incr3 *redis.IntCmd
	var seg *redis.Cmd
	var next, exec *redis.Cmd
	var ping *redis.StatusCmd
	_, err := cb.Pipelined(ctx, func(p redis.Pipeliner) error {
		incr1 = p.Incr(ctx, "seq")
		ping = p.Ping(ctx)
		incrBy = p.IncrBy(ctx, "seq", 3)
		seg = p.Do(ctx, "IDS.SEGMENT", "seq", 2)
		next = p.Do(ctx, "IDS.NEXT", "seq")
		p.Do(ctx, "MULTI")
		p.Do(ctx, "INCR", "seq")
		p.Do(ctx, "IDS.SEGMENT", "seq", 2)
		exec = p.Do(ctx, "EXEC")
		incr2 = p.Incr(ctx, "seq")
		incr3 = p.Incr(ctx, "seq")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
	check("INCR", incr1.Val(), n)
	check("PING", ping.Val(), "PONG")
	check("INCRBY 3", incrBy.Val(), n+3)
	check("IDS.SEGMENT 2", seg.Val(), []any{n + 4, n + 5})
	check("IDS.NEXT", next.Val(), fmt.Sprint(n+6))
	check("EXEC", exec.Val(), []any{n + 7, []any{n + 8, n + 9}})
	check("INCR after EXEC", incr2.Val(), n+10)
	check("INCR last", incr3.Val(), n+11)
}

// TestOrderedFollowerPipelinesConcurrent: many connections pipelining through the follower
// and the leader at once: every ID once, each connection's replies strictly increasing.
func TestOrderedFollowerPipelinesConcurrent(t *testing.T) {
	_, a, b := twoOrdered(t)
	mustIncr(t, pipeClient(t, b.addr), "seq")
	var seen idSet
	var addrs []string
	var clients []*redis.Client
	for i := range 12 {
		addr := b.addr
		if i%4 == 3 {
			addr = a.addr
		}
		addrs = append(addrs, addr)
		clients = append(clients, pipeClient(t, addr))
	}
	pipelineEach(t, clients, 20, 16, func(c int, v, last int64) error {
		dup := seen.add(v)
		if dup || v <= last {
			return fmt.Errorf("%s: %d after %d (duplicate %v)", addrs[c], v, last, dup)
		}
		return nil
	})
	if seen.len() != 12*20*16 {
		t.Fatalf("%d IDs, want %d", seen.len(), 12*20*16)
	}
}

// TestOrderedFollowerForwardsOnLoop: on the event loop, the follower's forwarded calls go
// through the loop's own connection to the leader (one per loop: the leader accepts one
// connection from a follower of one loop, however many of its clients pipeline at once),
// not the Forwarder's pooled ones (Conns: 2, both dialed as soon as two writes went out);
// every reply is still the client's own, in order.
func TestOrderedFollowerForwardsOnLoop(t *testing.T) {
	_, a, b := twoOrderedWith(t, ordOpts{manual: true, loops: 1})
	conns0 := a.h.srv.Stats().TotalConnections
	pipelineEach(t, pipeClients(t, 6, b.addr), 10, 16, func(_ int, v, last int64) error {
		if v <= last {
			return fmt.Errorf("%d after %d", v, last)
		}
		return nil
	})
	if n := a.h.srv.Stats().TotalConnections - conns0; n != 1 {
		t.Fatalf("the leader accepted %d connections while the follower forwarded, want 1 (its one loop's own)", n)
	}
}

// TestOrderedFollowerForwardsGoroutineModel: on the goroutine model (no loop, no loop task)
// the follower forwards through the Forwarder's pooled connections: pipelines and
// concurrent clients get the leader's IDs, each connection's strictly increasing, every ID
// once, and an unreachable leader answers UNAVAILABLE.
func TestOrderedFollowerForwardsGoroutineModel(t *testing.T) {
	_, a, b := twoOrderedWith(t, ordOpts{manual: true, model: resp.ModelGoroutine})
	ctx := context.Background()
	var seen idSet
	pipelineEach(t, pipeClients(t, 4, b.addr), 10, 8, func(_ int, v, last int64) error {
		dup := seen.add(v)
		if dup || v <= last {
			return fmt.Errorf("%d after %d (duplicate %v)", v, last, dup)
		}
		return nil
	})
	if seen.len() != 4*10*8 {
		t.Fatalf("%d IDs, want %d", seen.len(), 4*10*8)
	}
	a.stop()
	if _, err := b.client(t).Incr(ctx, "seq").Result(); err == nil || !strings.HasPrefix(err.Error(), "UNAVAILABLE ") {
		t.Fatalf("INCR with the leader gone: %v, want UNAVAILABLE", err)
	}
}

// TestOrderedRedirect: IDS.REDIRECT ON makes the follower answer LEADER host:port instead
// of forwarding (nothing reaches its Forwarder); a go-redis client with the followLeader
// hook of docs/SEGMENT.md follows it and gets the leader's next IDs; OFF and RESET forward
// again; the leader itself serves.
func TestOrderedRedirect(t *testing.T) {
	_, a, b := twoOrdered(t)
	ctx := context.Background()
	want := mustIncr(t, a.client(t), "seq") + 1
	redirectOn := func(ctx context.Context, cn *redis.Conn) error { return cn.Do(ctx, "IDS.REDIRECT", "ON").Err() }
	plain := redis.NewClient(&redis.Options{Addr: b.addr, Protocol: 2, MaxRetries: -1, OnConnect: redirectOn})
	defer plain.Close()
	r0 := b.h.fwd.Requests()
	id, err := plain.Incr(ctx, "seq").Result()
	wantCode(t, "INCR with IDS.REDIRECT ON at the follower", id, err, "LEADER", a.addr+" ordered tag 'seq'")
	if addr, ok := leaderAddr(err); !ok || addr != a.addr {
		t.Fatalf("LEADER error %q: address %q, want %q", err, addr, a.addr)
	}
	if n := b.h.fwd.Requests() - r0; n != 0 {
		t.Fatalf("%d requests forwarded with IDS.REDIRECT ON, want 0", n)
	}

	follow := &followLeader{opt: redis.Options{Protocol: 2, MaxRetries: -1, OnConnect: redirectOn}}
	defer follow.Close()
	c := redis.NewClient(&redis.Options{Addr: b.addr, Protocol: 2, MaxRetries: -1, OnConnect: redirectOn})
	defer c.Close()
	c.AddHook(follow)
	for range 5 {
		if got, err := c.Incr(ctx, "seq").Result(); err != nil || got != want {
			t.Fatalf("INCR through the redirect: %d %v, want %d", got, err, want)
		}
		want++
	}
	if got, err := c.Do(ctx, "IDS.SEGMENT", "seq", 2).Int64Slice(); err != nil || len(got) != 2 || got[0] != want {
		t.Fatalf("IDS.SEGMENT through the redirect: %v %v, want from %d", got, err, want)
	}
	want += 2
	if n := b.h.fwd.Requests() - r0; n != 0 {
		t.Fatalf("%d requests forwarded by the follower, want 0 (the client went to the leader)", n)
	}

	// At the leader, redirects on: served there.
	ca := redis.NewClient(&redis.Options{Addr: a.addr, Protocol: 2, MaxRetries: -1, OnConnect: redirectOn})
	defer ca.Close()
	if got, err := ca.Incr(ctx, "seq").Result(); err != nil || got != want {
		t.Fatalf("INCR at the leader with redirects on: %d %v, want %d", got, err, want)
	}
	want++

	// OFF, and RESET, forward again; a bad argument is a syntax error.
	cb := pipeClient(t, b.addr)
	for _, off := range [][]any{{"IDS.REDIRECT", "off"}, {"RESET"}} {
		if err := cb.Do(ctx, "IDS.REDIRECT", "on").Err(); err != nil {
			t.Fatal(err)
		}
		if err := cb.Do(ctx, off...).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := cb.Incr(ctx, "seq").Result(); err != nil || got != want {
			t.Fatalf("INCR after %v: %d %v, want %d (forwarded)", off, got, err, want)
		}
		want++
	}
	if err := cb.Do(ctx, "IDS.REDIRECT", "maybe").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR syntax error") {
		t.Fatalf("IDS.REDIRECT maybe: got %v, want ERR syntax error", err)
	}
}

// followLeader is the go-redis hook of docs/SEGMENT.md ("Followers and the leader"): a
// command answered "LEADER host:port ..." is sent again to that address (up to two hops,
// the lead may just have moved), on a client per leader made with opt.
type followLeader struct {
	opt     redis.Options
	mu      sync.Mutex
	clients map[string]*redis.Client
}

func (f *followLeader) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *followLeader) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *followLeader) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		for hop := 0; hop < 2; hop++ {
			addr, ok := leaderAddr(err)
			if !ok {
				break
			}
			cmd.SetErr(nil)
			err = f.client(addr).Process(ctx, cmd)
		}
		return err
	}
}

func (f *followLeader) client(addr string) *redis.Client {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clients == nil {
		f.clients = map[string]*redis.Client{}
	}
	c := f.clients[addr]
	if c == nil {
		opt := f.opt
		opt.Addr = addr
		c = redis.NewClient(&opt)
		f.clients[addr] = c
	}
	return c
}

func (f *followLeader) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.clients {
		_ = c.Close()
	}
}

// leaderAddr is the address of a "LEADER host:port ..." error reply.
func leaderAddr(err error) (string, bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return "", false
	}
	f := strings.Fields(re.Error())
	if len(f) < 2 || f[0] != "LEADER" {
		return "", false
	}
	return f[1], true
}

// TestOrderedFollowerPipelineManyLeaders: one follower's pipeline interleaves tags led by
// two other instances and a tag it leads itself: each forwarded call goes to one leader
// (a command for another leader, or one served here, ends it), so every reply is an ID of
// its own tag's sequence, none a TRYAGAIN of the wrong leader.
func TestOrderedFollowerPipelineManyLeaders(t *testing.T) {
	cl := newOrdCluster(t)
	a := cl.start(t, ordOpts{manual: true})
	b := cl.start(t, ordOpts{manual: true})
	c := cl.start(t, ordOpts{manual: true})
	ctx := context.Background()
	for _, x := range []struct {
		in  *ordInstance
		tag string
	}{{a, "sa"}, {c, "sc"}, {b, "sb"}} {
		if err := x.in.client(t).Do(ctx, "IDS.CREATE", x.tag, "ORDERED").Err(); err != nil {
			t.Fatal(err)
		}
		x.in.round(t)
	}
	// Each instance learns of the others' tags at its first request of them (TRYAGAIN until
	// its next lease call tells it the leader).
	for _, in := range []*ordInstance{a, b, c} {
		for _, tag := range []string{"sa", "sc", "sb"} {
			_, _ = incr(t, in.client(t), tag)
		}
		in.round(t)
	}
	cb := pipeClient(t, b.addr)
	last := map[string]int64{}
	for _, tag := range []string{"sa", "sc", "sb"} {
		last[tag] = mustIncr(t, cb, tag)
	}
	tags := []string{"sa", "sa", "sc", "sa", "sb", "sc", "sc", "sa", "sb", "sb", "sa", "sc"}
	for round := range 3 {
		cmds, err := cb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, tag := range tags {
				p.Incr(ctx, tag)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, cmd := range cmds {
			tag := tags[i]
			if got := cmd.(*redis.IntCmd).Val(); got != last[tag]+1 {
				t.Fatalf("round %d: INCR %s (%d of the pipeline): got %d, want %d", round, tag, i, got, last[tag]+1)
			}
			last[tag]++
		}
	}
}
