package main

// Followers and the leader on the built binary: pipelines sent to followers are forwarded
// to the leader a call per pipeline (counted by a proxy in front of every instance's
// advertised address), and a history of pipelined, single and redirected requests on every
// instance is linearizable (internal/lincheck).

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leafd/leafd/internal/e2e"
)

// forwardedCluster starts three instances on dsn, each advertising a counting proxy in front
// of its RESP address (the other instances forward to the leader through it; clients talk
// to the instances directly), and creates tag (ORDERED) through the first. Each proxy gets
// its target once its instance has reported the port it listens on.
func forwardedCluster(t *testing.T, dsn, tag string) ([]*e2e.Leafd, []*e2e.Proxy) {
	t.Helper()
	var lists [][]string
	var pxs []*e2e.Proxy
	for range 3 {
		px := e2e.StartProxy(t, "")
		pxs = append(pxs, px)
		lists = append(lists, orderedArgs(dsn, "--advertise-addr", px.Addr()))
	}
	ls := e2e.StartMany(t, lists...)
	for i, l := range ls {
		pxs[i].SetTarget(l.Addr)
	}
	createOrdered(t, ls[0], tag, 1000)
	for _, l := range ls { // each learns of the tag, and of its leader
		mustServe(t, l, tag)
	}
	return ls, pxs
}

// leaderByProxy is the index of the instance the instances agree leads tag: IDS.INFO names
// the advertised address, which is the instance's proxy.
func leaderByProxy(t *testing.T, ls []*e2e.Leafd, pxs []*e2e.Proxy, tag string) int {
	t.Helper()
	var lead int
	if !e2e.Poll(10*time.Second, func() bool {
		lead = -1
		for _, l := range ls {
			addr := tagInfo(t, l, tag)["leader"]
			j := -1
			for k, px := range pxs {
				if px.Addr() == addr {
					j = k
				}
			}
			if j < 0 || (lead >= 0 && j != lead) {
				return false
			}
			lead = j
		}
		return true
	}) {
		t.Fatalf("the instances do not agree on a leader of %s", tag)
	}
	return lead
}

// TestOrderedFollowerPipelineRoundTrips: a client's pipelines of 16 INCR sent to a follower,
// one after another on one connection, reach the leader in about one chunk each (the
// proxy in front of the leader counts them), not one per request; every reply is the
// leader's next ID, in order.
func TestOrderedFollowerPipelineRoundTrips(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	ls, pxs := forwardedCluster(t, dsn, "seq")
	lead := leaderByProxy(t, ls, pxs, "seq")
	f := ls[(lead+1)%len(ls)]
	c := e2e.ConnClient(f.Addr)
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Incr(ctx, "seq").Result(); err != nil { // the forwarding connections are dialed
		t.Fatal(err)
	}
	const pipelines, depth = 20, 16
	var chunks int64
	for _, px := range pxs {
		chunks -= px.Chunks()
	}
	last := int64(0)
	for i := range pipelines {
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range depth {
				p.Incr(ctx, "seq")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("pipeline %d: %v", i, err)
		}
		for j, cmd := range cmds {
			v := cmd.(*redis.IntCmd).Val()
			if last != 0 && v != last+1 {
				t.Fatalf("pipeline %d, INCR %d: got %d after %d, want the next ID", i, j, v, last)
			}
			last = v
		}
	}
	for _, px := range pxs {
		chunks += px.Chunks()
	}
	t.Logf("%d pipelines of %d INCR through the follower reached the leader in %d chunks", pipelines, depth, chunks)
	if chunks > 3*pipelines {
		t.Errorf("%d pipelines of %d INCR reached the leader in %d chunks, want at most %d (one forwarded call per pipeline, not one per request)",
			pipelines, depth, chunks, 3*pipelines)
	}
	e2e.BenchOut(t, "ordered_forward_chunks_per_pipeline", float64(chunks)/pipelines, "chunks")
}

// mustServe waits until l answers INCR tag with an ID.
func mustServe(t *testing.T, l *e2e.Leafd, tag string) {
	t.Helper()
	if _, _, err := l.WaitIncr(tag, 10*time.Second); err != nil {
		t.Fatalf("INCR %s on %s: %v", tag, l.Addr, err)
	}
}

// TestOrderedPipelinesLinearizable: on every instance, clients pipelining 8 requests at a
// time (INCR, INCRBY 3, IDS.SEGMENT 2), clients sending one request at a time, and on the
// followers clients with IDS.REDIRECT ON that follow LEADER to the leader; the checker
// finds no duplicate and no reply below one received before its request was sent.
func TestOrderedPipelinesLinearizable(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	ls, pxs := forwardedCluster(t, dsn, "seq")
	lead := leaderByProxy(t, ls, pxs, "seq")
	load := startLinLoad(t, "seq", ls, 1)
	var redirected sync.Map // instance -> *int64 of LEADER answers followed
	for i := range ls {
		load.pipeClient(i, 8)
		load.pipeClient(i, 8)
		if i != lead {
			n := new(int64)
			redirected.Store(i, n)
			load.redirectClient(i, n)
		}
	}
	for i := range ls {
		load.served(t, i, 6000, 30*time.Second, "pipelined load")
	}
	start := time.Now()
	res, _ := load.check(t, "ordered_pipelines", start, time.Hour, 3000, nil, orderedCodes...)
	redirected.Range(func(k, v any) bool {
		if n := *v.(*int64); n == 0 {
			t.Errorf("the redirecting client of instance %v followed no LEADER answer", k)
		}
		return true
	})
	t.Logf("ordered pipelines: %d ops, %d IDs", res.Ops, res.OK)
}

// pipeClient starts a client of instance inst that sends depth requests per pipeline, INCR,
// INCRBY 3 and IDS.SEGMENT 2 in turn, recording each reply in the pipeline's order with the
// pipeline's send stamp.
func (l *linLoad) pipeClient(inst, depth int) {
	cl := l.newClient(inst)
	l.wg.Go(func() {
		c := e2e.ConnClient(l.addrs()[inst])
		defer func() { _ = c.Close() }()
		ctx := context.Background()
		for !l.stop.Load() {
			cl.Send()
			cmds, _ := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for k := range depth {
					switch k % 3 {
					case 0:
						p.Incr(ctx, l.tag)
					case 1:
						p.IncrBy(ctx, l.tag, 3)
					default:
						p.Do(ctx, "IDS.SEGMENT", l.tag, 2)
					}
				}
				return nil
			})
			failed := false
			for k, cmd := range cmds {
				if err := cmd.Err(); err != nil {
					l.fail(inst, cl.Fail, err)
					failed = true
					continue
				}
				switch k % 3 {
				case 0:
					cl.OK(cmd.(*redis.IntCmd).Val(), 1)
				case 1:
					cl.OK(cmd.(*redis.IntCmd).Val(), 3)
				default:
					vs, err := cmd.(*redis.Cmd).Int64Slice()
					if err != nil {
						l.fail(inst, cl.Fail, err)
						continue
					}
					cl.OKEach(vs)
				}
				l.ok[inst].Add(1)
			}
			if failed {
				time.Sleep(retryPause)
			}
		}
	})
}

// redirectClient starts a client of instance inst with IDS.REDIRECT ON: an INCR answered
// "LEADER host:port" is sent again there (up to two hops), one op from the first send to the
// last reply; n counts the redirects followed.
func (l *linLoad) redirectClient(inst int, n *int64) {
	cl := l.newClient(inst)
	on := func(ctx context.Context, cn *redis.Conn) error { return cn.Do(ctx, "IDS.REDIRECT", "ON").Err() }
	dial := func(addr string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1,
			ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, OnConnect: on})
	}
	l.wg.Go(func() {
		clients := map[string]*redis.Client{}
		defer func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}()
		first := dial(l.addrs()[inst])
		defer func() { _ = first.Close() }()
		ctx := context.Background()
		for !l.stop.Load() {
			cl.Send()
			v, err := first.Incr(ctx, l.tag).Result()
			for hop := 0; hop < 2 && err != nil && strings.HasPrefix(err.Error(), "LEADER "); hop++ {
				addr := strings.Fields(err.Error())[1]
				if clients[addr] == nil {
					clients[addr] = dial(addr)
				}
				*n++
				v, err = clients[addr].Incr(ctx, l.tag).Result()
			}
			if err != nil {
				l.fail(inst, cl.Fail, err)
				time.Sleep(retryPause)
				continue
			}
			cl.OK(v, 1)
			l.ok[inst].Add(1)
		}
	})
}

// fail records err for a client of instance inst (its code, or NET for a transport error).
func (l *linLoad) fail(inst int, record func(string), err error) {
	code, isReply := e2e.ReplyCode(err)
	if !isReply {
		code = "NET"
	}
	record(code)
	l.mu.Lock()
	l.codes[inst][code]++
	l.lastEr[inst] = err.Error()
	l.mu.Unlock()
}
