package main

// The graceful-restart remainder on the built binary (docs/SEGMENT.md, "Graceful restart: the
// remainder file"): no ID lost to SIGTERM restarts under load, nothing reissued after a
// kill -9 that follows a resume, nor from a restored copy of the data dir.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// remainderStore names the two stores the tests run on; args start leafd on it (the MySQL
// database is fresh, with tag "g" created at step 100 so that restarts cut segments often).
func remainderStores(t *testing.T) map[string]func(t *testing.T) []string {
	return map[string]func(t *testing.T) []string{
		"embedded": func(t *testing.T) []string { return []string{"--worker-id", "1"} },
		"mysql": func(t *testing.T) []string {
			dsn, _ := e2e.SharedDB(t)
			return []string{"--worker-id", "1", "--mysql-dsn", dsn}
		},
	}
}

// TestGracefulRestartsLoseNoID: 20 SIGTERM restarts of one instance while 4 clients send
// INCR on a tag it alone serves; the checker finds every integer from 1 to the highest ID
// exactly once (0 lost, 0 duplicates). Each restart waits for 200 more IDs (an event), not a
// fixed time.
func TestGracefulRestartsLoseNoID(t *testing.T) {
	t.Parallel()
	for name, args := range remainderStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := e2e.Start(t, args(t)...)
			if _, err := l.Do("IDS.CREATE", "g", "STEP", 100); err != nil {
				t.Fatal(err)
			}
			var (
				mu   sync.Mutex
				seen = map[int64]int{}
				n    atomic.Int64
				stop atomic.Bool
				wg   sync.WaitGroup
			)
			for range 4 {
				wg.Go(func() {
					for !stop.Load() {
						c := e2e.ConnClient(l.Addr)
						for !stop.Load() {
							v, err := c.Incr(t.Context(), "g").Result()
							if err != nil {
								break // the server is restarting: a new connection
							}
							mu.Lock()
							seen[v]++
							mu.Unlock()
							n.Add(1)
						}
						_ = c.Close()
						time.Sleep(5 * time.Millisecond) // pacing while the server is down
					}
				})
			}
			e2e.Eventually(t, 30*time.Second, "IDs before the first restart", e2e.Grown(&n, 200))
			for i := range 20 {
				if err := l.Stop(30 * time.Second); err != nil {
					t.Fatalf("restart %d: %v", i, err)
				}
				if !strings.Contains(l.Log(), "segment: remainder saved") {
					t.Fatalf("restart %d: no remainder saved\n%s", i, e2e.Tail(l.Log(), 20))
				}
				l.Restart()
				e2e.Eventually(t, 30*time.Second, fmt.Sprintf("IDs after restart %d", i), e2e.Grown(&n, 200))
			}
			stop.Store(true)
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			ids := make([]int64, 0, len(seen))
			for v, c := range seen {
				if c != 1 {
					t.Errorf("ID %d issued %d times", v, c)
				}
				ids = append(ids, v)
			}
			slices.Sort(ids)
			var lost []int64
			for i, want := 0, int64(1); want <= ids[len(ids)-1]; want++ {
				if ids[i] == want {
					i++
					continue
				}
				if len(lost) < 10 {
					lost = append(lost, want)
				}
			}
			if int64(len(ids)) != ids[len(ids)-1] {
				t.Fatalf("%d IDs seen, highest %d: %d lost across 20 graceful restarts (first %v)",
					len(ids), ids[len(ids)-1], ids[len(ids)-1]-int64(len(ids)), lost)
			}
			t.Logf("%s: %d IDs over 20 SIGTERM restarts, every integer 1..%d once", name, len(ids), len(ids))
		})
	}
}

// incrN runs n INCR on tag and adds the IDs to ids, failing on a duplicate.
func incrN(t *testing.T, l *e2e.Leafd, tag string, n int, ids map[int64]string, who string) []int64 {
	t.Helper()
	var got []int64
	for range n {
		v, err := l.Incr(tag)
		if err != nil {
			t.Fatalf("%s: INCR: %v", who, err)
		}
		if w, dup := ids[v]; dup {
			t.Fatalf("%s: ID %d reissued (first issued by %s)", who, v, w)
		}
		ids[v] = who
		got = append(got, v)
	}
	return got
}

// TestKillAfterResumeReissuesNothing: a start that resumed a remainder (IDs 6.. follow the
// first life's 1..5 without a gap), then a kill -9, then a start: nothing of the remainder is
// served again (it was consumed in the store and removed before the first ID of it).
func TestKillAfterResumeReissuesNothing(t *testing.T) {
	t.Parallel()
	for name, args := range remainderStores(t) {
		t.Run(name, func(t *testing.T) {
			ids := map[int64]string{}
			l := e2e.Start(t, args(t)...)
			if _, err := l.Do("IDS.CREATE", "k", "STEP", 1000); err != nil {
				t.Fatal(err)
			}
			incrN(t, l, "k", 5, ids, "first life")
			if err := l.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			l.Restart()
			l.WaitLog("serving the remainder of the previous graceful shutdown first", 10*time.Second)
			if got := incrN(t, l, "k", 5, ids, "resumed life"); got[0] != 6 {
				t.Fatalf("resumed life: first ID %d, want 6 (no gap)", got[0])
			}
			l.Kill()
			l.Restart()
			incrN(t, l, "k", 5, ids, "after kill -9")
			if strings.Contains(l.Log()[strings.LastIndex(l.Log(), e2e.ReadyMsg):], "serving the remainder") {
				t.Fatal("the start after kill -9 served a remainder again")
			}
		})
	}
}

// TestRestoredRemainderReissuesNothing: the data dir's remainder file and marks.db copied
// after a graceful stop and put back after the next life served from the remainder (a restored
// backup or a cloned volume; with the embedded store leafd.db stays live: restoring it too is
// the undetectable whole-data-dir restore, docs/SEGMENT.md) are refused: the store recorded
// the file's token as consumed. The start says so and reissues nothing.
func TestRestoredRemainderReissuesNothing(t *testing.T) {
	t.Parallel()
	for name, args := range remainderStores(t) {
		t.Run(name, func(t *testing.T) {
			ids := map[int64]string{}
			l := e2e.Start(t, args(t)...)
			if _, err := l.Do("IDS.CREATE", "r", "STEP", 1000); err != nil {
				t.Fatal(err)
			}
			incrN(t, l, "r", 5, ids, "first life")
			if err := l.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			backup := map[string][]byte{}
			for _, f := range []string{"remainder.json", "marks.db"} {
				b, err := os.ReadFile(filepath.Join(l.DataDir, f))
				if err != nil {
					t.Fatal(err)
				}
				backup[f] = b
			}
			l.Restart()
			incrN(t, l, "r", 50, ids, "resumed life")
			if err := l.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			for f, b := range backup {
				if err := os.WriteFile(filepath.Join(l.DataDir, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			l.Restart()
			l.WaitLog("consumed before", 10*time.Second)
			incrN(t, l, "r", 50, ids, "restored data dir")
		})
	}
}
