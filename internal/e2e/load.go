package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reply is one INCR as a client saw it.
type Reply struct {
	ID   int64 // 0 on error
	Code string
	Err  error         // set on error
	At   time.Time     // when the reply arrived
	Took time.Duration // round trip
}

// ConnLoad is what one client connection of a load saw.
type ConnLoad struct {
	Inst    int // index of the server it talks to
	IDs     []int64
	Replies []Reply // every reply, when Load.Keep is set
	Codes   map[string]int
	NetErrs int
	LastNet error
	Order   string // first violation of strict increase, if any
}

// Counts are a load's live totals across its connections: what phases wait on.
type Counts struct {
	OK      atomic.Int64 // numbers served
	Refused atomic.Int64 // coded error replies
	Net     atomic.Int64 // transport errors
}

// Load describes an INCR load: Conns connections per server, INCR on Tag, until Stop says so.
type Load struct {
	Tag    string
	Conns  int                      // connections per server
	Total  int                      // when set instead of Conns: this many connections, dealt round-robin
	Keep   bool                     // record every reply (latency, timing)
	Stop   func() bool              // checked before each INCR
	Pause  *atomic.Int64            // optional: pacing sleep after each request, ns
	Count  *Counts                  // optional: live totals
	ByInst []Counts                 // optional: live totals per server (index as in Addrs)
	Addrs  func() []string          // the servers' addresses
	Seen   func(inst int, id int64) // optional: called with every ID served
	Hold   *atomic.Bool             // optional: while true, send nothing
}

// RunLoad runs the load and returns each connection's record once Stop holds everywhere.
func RunLoad(spec Load) []*ConnLoad {
	addrs := spec.Addrs()
	var wg sync.WaitGroup
	var loads []*ConnLoad
	add := func(i int) {
		cl := &ConnLoad{Inst: i, Codes: map[string]int{}}
		loads = append(loads, cl)
		wg.Go(func() { IncrLoop(addrs[i], spec, cl) })
	}
	for i := range spec.Total {
		add(i % len(addrs))
	}
	for i := range addrs {
		for range spec.Conns {
			add(i)
		}
	}
	wg.Wait()
	return loads
}

// IncrLoop sends INCR on one connection to addr and checks that the numbers it gets increase
// strictly. A transport error (the server was killed) ends the connection: order is then
// checked afresh on the next one.
func IncrLoop(addr string, spec Load, cl *ConnLoad) {
	c := ConnClient(addr)
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	var last int64
	for !spec.Stop() {
		if spec.Hold != nil && spec.Hold.Load() {
			time.Sleep(time.Millisecond) // pacing: held, send nothing
			continue
		}
		t0 := time.Now()
		v, err := c.Incr(ctx, spec.Tag).Result()
		now := time.Now()
		r := Reply{ID: v, Err: err, At: now, Took: now.Sub(t0)}
		switch code, isReply := ReplyCode(err); {
		case err == nil:
			if v <= last && cl.Order == "" {
				cl.Order = fmt.Sprintf("connection to instance %d: got %d after %d, want strictly increasing", cl.Inst, v, last)
			}
			last = v
			cl.IDs = append(cl.IDs, v)
			if spec.Seen != nil {
				spec.Seen(cl.Inst, v)
			}
			spec.count(cl.Inst, func(c *Counts) { c.OK.Add(1) })
		case isReply:
			r.ID, r.Code = 0, code
			cl.Codes[code]++
			spec.count(cl.Inst, func(c *Counts) { c.Refused.Add(1) })
		default:
			r.ID = 0
			cl.NetErrs++
			cl.LastNet = err
			last = 0
			spec.count(cl.Inst, func(c *Counts) { c.Net.Add(1) })
			time.Sleep(20 * time.Millisecond) // pacing: the server is down, do not spin
		}
		if spec.Keep {
			cl.Replies = append(cl.Replies, r)
		}
		if spec.Pause != nil {
			if d := spec.Pause.Load(); d > 0 {
				time.Sleep(time.Duration(d)) // pacing
			}
		}
	}
}

func (spec Load) count(inst int, add func(*Counts)) {
	if spec.Count != nil {
		add(spec.Count)
	}
	if inst < len(spec.ByInst) {
		add(&spec.ByInst[inst])
	}
}

// Background runs the load on its own goroutine; wait returns the records once Stop holds.
func Background(spec Load) (wait func() []*ConnLoad) {
	res := make(chan []*ConnLoad, 1)
	go func() { res <- RunLoad(spec) }()
	return func() []*ConnLoad { return <-res }
}

// Grown returns a condition for Eventually: true once n has grown by at least by since
// Grown was called.
func Grown(n *atomic.Int64, by int64) func() bool {
	from := n.Load()
	return func() bool { return n.Load()-from >= by }
}

// Totals sums what a load's connections saw.
type Totals struct {
	IDs     int
	Codes   map[string]int
	NetErrs int
	LastNet error
}

// Sum sums what the connections saw.
func Sum(loads []*ConnLoad) Totals {
	tt := Totals{Codes: map[string]int{}}
	for _, cl := range loads {
		tt.IDs += len(cl.IDs)
		for k, v := range cl.Codes {
			tt.Codes[k] += v
		}
		tt.NetErrs += cl.NetErrs
		if cl.LastNet != nil {
			tt.LastNet = cl.LastNet
		}
	}
	return tt
}

// Phase is what the connections saw in [From, To): IDs served, refusals by code, transport
// errors and the round trips of the served ones.
func Phase(loads []*ConnLoad, from, to time.Time) (ids int, codes map[string]int, net int, lat []time.Duration) {
	codes = map[string]int{}
	for _, cl := range loads {
		for _, r := range cl.Replies {
			if r.At.Before(from) || !r.At.Before(to) {
				continue
			}
			switch {
			case r.Err == nil:
				ids++
				lat = append(lat, r.Took)
			case r.Code != "":
				codes[r.Code]++
			default:
				net++
			}
		}
	}
	return ids, codes, net, lat
}

// FirstOK is how long after from the first ID (at or above floor) arrived before end, on
// the connections to instance inst (-1: any); ok is false when none did.
func FirstOK(loads []*ConnLoad, inst int, floor int64, from, end time.Time) (time.Duration, bool) {
	best, ok := time.Duration(0), false
	for _, cl := range loads {
		if inst >= 0 && cl.Inst != inst {
			continue
		}
		for _, rp := range cl.Replies {
			if rp.Err == nil && rp.ID >= floor && rp.At.After(from) && rp.At.Before(end) {
				if d := rp.At.Sub(from); !ok || d < best {
					best, ok = d, true
				}
				break
			}
		}
	}
	return best, ok
}

// P999 returns the 99.9th percentile of ds (sorting ds).
func P999(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*999/1000)]
}

// Until returns a stop function: true once n reaches want or the deadline passes.
func Until(n *atomic.Int64, want int64, deadline time.Time) func() bool {
	return func() bool { return n.Load() >= want || time.Now().After(deadline) }
}

// For returns a stop function that is true after d.
func For(d time.Duration) func() bool {
	end := time.Now().Add(d)
	return func() bool { return time.Now().After(end) }
}

// BatchLoad draws batches of IDs (IDS.SNOWFLAKE n, or any command returning integers) from
// a server on several connections until its context ends, into an IDSet. It counts the
// NOWORKER refusals and records any other error (unless the context ended).
type BatchLoad struct {
	OK, NoWorker atomic.Int64
	mu           sync.Mutex
	other        []string
}

// Run starts n connections' worth of load on c (a pooled client) under wg; args is the
// command, its replies go to ids as who. StopOnError ends a connection at its first error
// that is not NOWORKER (the server was killed under it).
func (s *BatchLoad) Run(ctx context.Context, wg *sync.WaitGroup, c *redis.Client, who string, ids *IDSet, n int, stopOnError bool, args ...any) {
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				v, err := c.Do(ctx, args...).Int64Slice()
				switch {
				case err == nil:
					ids.Add(who, v...)
					s.OK.Add(1)
				case strings.HasPrefix(err.Error(), "NOWORKER "):
					s.NoWorker.Add(1)
					time.Sleep(5 * time.Millisecond) // pacing: refused, do not spin
				case ctx.Err() != nil:
				case stopOnError:
					return
				default:
					s.mu.Lock()
					s.other = append(s.other, err.Error())
					s.mu.Unlock()
					time.Sleep(5 * time.Millisecond) // pacing
				}
			}
		})
	}
}

// Other returns the errors that were neither IDs nor NOWORKER.
func (s *BatchLoad) Other() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.other)
}
