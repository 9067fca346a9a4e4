package main

// The ZooKeeper snowflake tests against a 3-node ensemble on loopback, and the ensemble's own
// faults under load: its leader killed, then a follower frozen (SIGSTOP, a partition as its
// clients see it), while three instances hold worker ids and issue.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/internal/testkit"
)

func TestZKEnsemble(t *testing.T) {
	t.Parallel()
	ens := testenv.StartZKEnsemble(t, 3)
	conn := ens.Connect()
	t.Run("two instances and restart", func(t *testing.T) { zkTwoInstancesAndRestart(t, conn) })
	t.Run("five at once", func(t *testing.T) { zkFiveAtOnce(t, conn) })
	t.Run("kill restarts under load", func(t *testing.T) { zkKillRestartsUnderLoad(t, conn) })
	t.Run("leader killed, follower partitioned", func(t *testing.T) { zkEnsembleFaults(t, ens) })
}

// gapLoad issues IDS.SNOWFLAKE 20 on one connection per instance into one IDSet and records,
// per instance, the longest time between two served batches (how long it did not serve) and
// when it ended.
type gapLoad struct {
	ids   *e2e.IDSet
	wg    sync.WaitGroup
	mu    sync.Mutex
	ok    []int
	last  []time.Time
	gap   []time.Duration
	gapTo []time.Time
	codes map[string]int
}

func startGapLoad(ctx context.Context, ls []*e2e.Leafd) *gapLoad {
	g := &gapLoad{ids: e2e.NewIDSet(), ok: make([]int, len(ls)), last: make([]time.Time, len(ls)),
		gap: make([]time.Duration, len(ls)), gapTo: make([]time.Time, len(ls)), codes: map[string]int{}}
	now := time.Now()
	for i, l := range ls {
		g.last[i] = now
		c := l.Client(2)
		g.wg.Go(func() {
			for ctx.Err() == nil {
				v, err := c.Do(ctx, "IDS.SNOWFLAKE", 20).Int64Slice()
				at := time.Now()
				g.mu.Lock()
				if err == nil {
					g.ids.Add(fmt.Sprintf("instance %d", i), v...)
					g.ok[i]++
					if d := at.Sub(g.last[i]); d > g.gap[i] {
						g.gap[i], g.gapTo[i] = d, at
					}
					g.last[i] = at
				} else if ctx.Err() == nil {
					code, _, _ := strings.Cut(err.Error(), " ")
					g.codes[code]++
				}
				g.mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond) // pacing: refused, do not spin
				}
			}
		})
	}
	return g
}

// served waits until every instance served n more batches than when it was called.
func (g *gapLoad) served(t *testing.T, what string, n int, d time.Duration) {
	t.Helper()
	g.mu.Lock()
	from := append([]int(nil), g.ok...)
	g.mu.Unlock()
	e2e.Eventually(t, d, what, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for i := range from {
			if g.ok[i] < from[i]+n {
				return false
			}
		}
		return true
	})
}

// zkEnsembleFaults: the leader is killed (and rejoins), then a follower is frozen for twice
// the session timeout; under load on three instances, with worker reuse off and on. No ID is
// issued twice, worker ids stay distinct and unchanged, and no instance stops serving for
// longer than the session timeout, plus the time the instances and this test waited for a
// CPU inside that pause (testkit.Stalls; at most maxStall): on a loaded machine a starved
// process is not a server that waits.
func zkEnsembleFaults(t *testing.T, ens *testenv.ZKEnsemble) {
	const session = 3 * time.Second
	const maxStall = 1500 * time.Millisecond
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"reuse off", nil},
		{"reuse on", []string{"--worker-reuse"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			name := e2e.ZKTestName(t)
			var args [][]string
			for range 3 {
				args = append(args, e2e.ZKArgs(t, ens.Connect(), name,
					append([]string{"--zk-session-timeout", session.String(), "--lease-window", "500ms"}, mode.args...)...))
			}
			ls := e2e.StartMany(t, args...)
			var pids []int
			for _, l := range ls {
				pids = append(pids, l.PID())
			}
			stalls := testkit.WatchStalls(t, pids...)
			workers := map[int64]int{}
			for i, l := range ls {
				workers[e2e.WorkerOf(t, l)] = i
			}
			if len(workers) != len(ls) {
				t.Fatalf("worker ids %v: want %d distinct", workers, len(ls))
			}
			ctx, cancel := context.WithCancel(context.Background())
			g := startGapLoad(ctx, ls)
			g.served(t, "50 batches on every instance", 50, 30*time.Second)

			leader := ens.WaitLeader(-1, 10*time.Second)
			ens.Members[leader].Kill()
			next := ens.WaitLeader(leader, 30*time.Second)
			g.served(t, "20 batches on every instance after the leader's death", 20, 30*time.Second)
			ens.Members[leader].Start()

			follower := busiestFollower(t, ens, next)
			ens.Members[follower].Pause()
			paused := time.Now()
			g.served(t, "20 batches on every instance with a follower frozen", 20, 30*time.Second)
			// The fault lasts twice the session timeout: the frozen follower's clients must
			// find another member within their session, or lose it.
			e2e.Eventually(t, 3*session, "the follower frozen for twice the session timeout", func() bool {
				return time.Since(paused) >= 2*session
			})
			g.served(t, "20 batches on every instance after twice the session timeout", 20, 30*time.Second)
			ens.Members[follower].Resume()
			g.served(t, "20 batches after the follower resumed", 20, 30*time.Second)
			cancel()
			g.wg.Wait()

			g.ids.Check(t, 10000)
			for i, l := range ls {
				if w := e2e.WorkerOf(t, l); workers[w] != i {
					t.Errorf("instance %d: worker id %d after the faults, want its own (%v)", i, w, workers)
				}
				stall := min(stalls.In(g.gapTo[i].Add(-g.gap[i]), g.gapTo[i]), maxStall)
				if g.gap[i] > session+stall {
					t.Errorf("instance %d: did not serve for %v, want at most the session timeout %v and %v of CPU stall in that time (%s)",
						i, g.gap[i].Round(time.Millisecond), session, stall.Round(time.Millisecond), testkit.Pressure())
				}
				t.Logf("instance %d: %d batches, longest pause %v (CPU stall in it %v)", i, g.ok[i], g.gap[i].Round(time.Millisecond), stall.Round(time.Millisecond))
			}
			t.Logf("refusals: %v", g.codes)
		})
	}
}

// busiestFollower is the member other than leader with the most client connections (mntr's
// zk_num_alive_connections), so that freezing it cuts some instance off.
func busiestFollower(t *testing.T, ens *testenv.ZKEnsemble, leader int) int {
	t.Helper()
	best, most := -1, -1
	for i, z := range ens.Members {
		if i == leader {
			continue
		}
		out, err := testenv.FourLetter(z.Addr(), "mntr", time.Second)
		n := -1
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, "zk_num_alive_connections\t"); ok && err == nil {
				n, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if n > most {
			best, most = i, n
		}
	}
	t.Logf("freezing follower %d (%d client connections)", best, most)
	return best
}
