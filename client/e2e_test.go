package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// The built leafd, made once for the tests and benchmarks that need one.
var (
	buildOnce     sync.Once
	buildErr      error
	cleanupBinary func()
)

func needBinary(t testing.TB) {
	t.Helper()
	buildOnce.Do(func() { cleanupBinary, buildErr = e2e.Build("../cmd/leafd") })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// A child process of TestClientProcessesE2E: this test binary run again with childEnv set.
const (
	childEnv   = "LEAFD_CLIENT_CHILD"  // the addresses, comma-separated
	childTag   = "LEAFD_CLIENT_TAG"    // the tag
	childCount = "LEAFD_CLIENT_COUNT"  // IDs to take
	childOut   = "LEAFD_CLIENT_OUT"    // the file of the IDs (int64 little endian)
	childGo    = "LEAFD_CLIENT_GOROUT" // goroutines
)

// childSummary is what a child prints last: the errors it saw by code.
type childSummary struct {
	IDs     int64            `json:"ids"`
	Errors  map[string]int64 `json:"errors"`
	Untyped []string         `json:"untyped"`
}

// childMain takes LEAFD_CLIENT_COUNT IDs with LEAFD_CLIENT_GOROUT goroutines, retrying every
// retryable error, writes them to LEAFD_CLIENT_OUT, prints "progress N" lines as it goes
// and the summary as its last line.
func childMain() int {
	total, _ := strconv.ParseInt(os.Getenv(childCount), 10, 64)
	gs, _ := strconv.Atoi(os.Getenv(childGo))
	tag := os.Getenv(childTag)
	c, err := New(Options{Addrs: strings.Split(os.Getenv(childEnv), ","), Timeout: time.Second})
	if err != nil {
		fmt.Println(err)
		return 2
	}
	out, err := os.Create(os.Getenv(childOut))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	var (
		mu      sync.Mutex
		sum     = childSummary{Errors: map[string]int64{}}
		taken   atomic.Int64
		stopped = time.Now().Add(3 * time.Minute)
		wg      sync.WaitGroup
	)
	per := total / int64(gs)
	for range gs {
		wg.Go(func() {
			ids := make([]int64, 0, per)
			for int64(len(ids)) < per && time.Now().Before(stopped) {
				id, err := c.Next(context.Background(), tag)
				if err != nil {
					mu.Lock()
					var e *Error
					if errors.As(err, &e) {
						sum.Errors[e.Code]++
					} else if len(sum.Untyped) < 10 {
						sum.Untyped = append(sum.Untyped, err.Error())
					}
					mu.Unlock()
					if id != 0 {
						mu.Lock()
						sum.Untyped = append(sum.Untyped, fmt.Sprintf("an ID (%d) with an error", id))
						mu.Unlock()
					}
					time.Sleep(time.Millisecond) // pacing of retries only
					continue
				}
				ids = append(ids, id)
				if n := taken.Add(1); n%250_000 == 0 {
					mu.Lock()
					fmt.Printf("progress %d\n", n)
					mu.Unlock()
				}
			}
			buf := make([]byte, 8*len(ids))
			for i, id := range ids {
				binary.LittleEndian.PutUint64(buf[8*i:], uint64(id))
			}
			mu.Lock()
			_, _ = out.Write(buf)
			sum.IDs += int64(len(ids))
			mu.Unlock()
		})
	}
	wg.Wait()
	_ = c.Close()
	if err := out.Close(); err != nil {
		fmt.Println(err)
		return 2
	}
	b, _ := json.Marshal(sum)
	fmt.Printf("summary %s\n", b)
	return 0
}

// child is one running child process and the progress it reported.
type child struct {
	cmd      *exec.Cmd
	out      string
	progress atomic.Int64
	summary  chan childSummary
}

func startChild(t *testing.T, addrs []string, tag string, count int64, gs int) *child {
	t.Helper()
	ch := &child{out: filepath.Join(t.TempDir(), "ids"), summary: make(chan childSummary, 1)}
	ch.cmd = exec.Command(os.Args[0], "-test.run=^$")
	ch.cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(addrs, ","), childTag+"="+tag,
		childCount+"="+strconv.FormatInt(count, 10), childOut+"="+ch.out, childGo+"="+strconv.Itoa(gs))
	pr, err := ch.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch.cmd.Stderr = os.Stderr
	if err := ch.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.cmd.Process.Kill(); _ = ch.cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(pr)
		var s childSummary
		for sc.Scan() {
			line := sc.Text()
			if n, ok := strings.CutPrefix(line, "progress "); ok {
				v, _ := strconv.ParseInt(n, 10, 64)
				ch.progress.Store(v)
			} else if js, ok := strings.CutPrefix(line, "summary "); ok {
				_ = json.Unmarshal([]byte(js), &s)
			} else {
				t.Logf("child: %s", line)
			}
		}
		ch.summary <- s
	}()
	return ch
}

func (ch *child) ids(t *testing.T) []int64 {
	t.Helper()
	f, err := os.Open(ch.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(b)/8)
	for i := range ids {
		ids[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return ids
}

// TestClientProcessesE2E: two processes, each a client with 8 goroutines, take 5 M IDs each
// of one tag from two leafd instances on one MariaDB, while one instance is restarted
// (SIGTERM) and the other killed (-9) and started again mid-run: no ID twice, no ID with an
// error, every error an *Error.
func TestClientProcessesE2E(t *testing.T) {
	needBinary(t)
	dsn, db := e2e.SharedDB(t)
	a := e2e.StartMySQL(t, dsn)
	b := e2e.StartMySQL(t, dsn)
	e2e.CreateTag(t, a, db, "order", 10000)
	const perChild = 5_000_000
	c1 := startChild(t, []string{a.Addr, b.Addr}, "order", perChild, 8)
	c2 := startChild(t, []string{b.Addr, a.Addr}, "order", perChild, 8)
	past := func(n int64) func() bool {
		return func() bool { return c1.progress.Load() >= n && c2.progress.Load() >= n }
	}
	e2e.Eventually(t, 90*time.Second, "both clients past 1 M IDs", past(1_000_000))
	if err := a.Stop(30 * time.Second); err != nil {
		t.Fatalf("stopping instance a: %v", err)
	}
	a.Restart()
	e2e.Eventually(t, 90*time.Second, "both clients past 2 M IDs after the restart", past(2_000_000))
	b.Kill()
	e2e.Eventually(t, 90*time.Second, "both clients past 3 M IDs after the kill", past(3_000_000))
	b.Restart()
	var all []int64
	for i, ch := range []*child{c1, c2} {
		var s childSummary
		select {
		case s = <-ch.summary:
		case <-time.After(3 * time.Minute):
			t.Fatalf("client %d did not finish", i+1)
		}
		if err := ch.cmd.Wait(); err != nil {
			t.Fatalf("client %d: %v", i+1, err)
		}
		if len(s.Untyped) > 0 {
			t.Errorf("client %d: errors that are not *client.Error, or IDs with errors: %q", i+1, s.Untyped)
		}
		ids := ch.ids(t)
		if int64(len(ids)) != perChild || s.IDs != perChild {
			t.Errorf("client %d: %d IDs (summary %d), want %d", i+1, len(ids), s.IDs, perChild)
		}
		t.Logf("client %d: %d IDs, errors by code %v", i+1, len(ids), s.Errors)
		all = append(all, ids...)
	}
	slices.Sort(all)
	dups := 0
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			dups++
		}
	}
	t.Logf("%d IDs from two processes, %d duplicates", len(all), dups)
	if dups != 0 {
		t.Fatalf("%d duplicate IDs", dups)
	}
	if all[0] < 1 {
		t.Fatalf("an ID below 1: %d", all[0])
	}
}
