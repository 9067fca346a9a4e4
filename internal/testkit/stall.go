package testkit

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Stalls measures, over a test, how long the processes it watches (this one and the servers
// it names) waited for a CPU: the kernel's run_delay of their threads (schedstat), and how
// late a goroutine of this process wakes from its sleeps (garbage collector pauses and the Go
// scheduler, which the kernel does not see). A test that asserts a latency bound widens its
// slack by the stall inside the measured window, so that the machine's load does not count
// against the server; a server that really waits longer than the bound (sleeping, not
// starved) adds no stall and still fails.
type Stalls struct {
	pids []int
	mu   sync.Mutex
	seen []stallSample
	last map[[2]int]time.Duration // run_delay by (pid, tid) at the latest sample
	stop chan struct{}
	done chan struct{}
}

type stallSample struct {
	at    time.Time
	delay time.Duration // run_delay of the watched processes since the watch began (see sample)
	late  time.Duration // how late the watching goroutine woke for this sample
}

// stallTick is the watching goroutine's sleep: the windows' resolution.
const stallTick = 20 * time.Millisecond

// WatchStalls samples this process and pids every stallTick until the test ends.
func WatchStalls(t testing.TB, pids ...int) *Stalls {
	s := &Stalls{pids: append([]int{os.Getpid()}, pids...), last: map[[2]int]time.Duration{},
		stop: make(chan struct{}), done: make(chan struct{})}
	s.sample(time.Now(), 0) // the baseline: delay before the watch does not count
	s.seen[0].delay = 0
	go s.run()
	t.Cleanup(func() { close(s.stop); <-s.done })
	return s
}

func (s *Stalls) run() {
	defer close(s.done)
	for {
		due := time.Now().Add(stallTick)
		select {
		case <-s.stop:
			return
		case <-time.After(stallTick):
		}
		now := time.Now()
		s.sample(now, max(now.Sub(due), 0))
	}
}

// sample adds, for each watched process, the run_delay of its thread that waited longest
// since the previous sample (a request handled by one goroutine waits at most that, whichever
// thread runs it; threads waiting side by side are not added up); a thread born since counts
// in full.
func (s *Stalls) sample(at time.Time, late time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var total time.Duration
	if n := len(s.seen); n > 0 {
		total = s.seen[n-1].delay
	}
	for _, pid := range s.pids {
		var most time.Duration // the process's thread that waited longest since the last sample
		dir := "/proc/" + strconv.Itoa(pid) + "/task"
		tasks, _ := os.ReadDir(dir)
		for _, e := range tasks {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
			f := strings.Fields(string(b))
			if err != nil || len(f) < 2 {
				continue
			}
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			d, key := time.Duration(ns), [2]int{pid, tid}
			most = max(most, d-s.last[key])
			s.last[key] = d
		}
		total += most
	}
	s.seen = append(s.seen, stallSample{at: at, delay: total, late: late})
}

// In is the stall over [from, to] (widened to the samples around it): the larger of the
// watched processes' run_delay (as sample adds it up) and the watching goroutine's lateness
// summed, the two being partly the same wait; at most the window itself.
func (s *Stalls) In(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, j := 0, len(s.seen)-1
	for i < j && !s.seen[i+1].at.After(from) {
		i++
	}
	for k := i; k <= j; k++ {
		if !s.seen[k].at.Before(to) {
			j = k
			break
		}
	}
	var late time.Duration
	for k := i + 1; k <= j; k++ {
		late += s.seen[k].late
	}
	return min(max(s.seen[j].delay-s.seen[i].delay, late), max(to.Sub(from), 0))
}

// Pressure is the machine's CPU pressure line (/proc/pressure/cpu "some"), for messages;
// "" where the kernel has none.
func Pressure() string {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return "cpu pressure " + line
}
