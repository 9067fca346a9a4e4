package boltstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leafd/leafd/segment"
)

func openTestBolt(t *testing.T, path string) *BoltStore {
	t.Helper()
	s, err := OpenBolt(path, BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestBoltAllocateSequence(t *testing.T) {
	ctx := context.Background()
	s := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	if err := s.Create(ctx, segment.Tag{Name: "order", MaxID: 1, Step: 1000, Description: "orders"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	tests := []struct {
		name string
		step int64
		want segment.Alloc
	}{
		{name: "stored step", step: 0, want: segment.Alloc{MaxID: 1001, Step: 1000}},
		{name: "stored step again", step: -1, want: segment.Alloc{MaxID: 2001, Step: 1000}},
		{name: "custom step", step: 5000, want: segment.Alloc{MaxID: 7001, Step: 1000}},
		{name: "custom step of one", step: 1, want: segment.Alloc{MaxID: 7002, Step: 1000}},
		{name: "back to stored", step: 0, want: segment.Alloc{MaxID: 8002, Step: 1000}},
	}
	for _, tt := range tests {
		got, err := s.Allocate(ctx, "order", tt.step)
		if err != nil {
			t.Fatalf("%s: Allocate: %v", tt.name, err)
		}
		if got != tt.want {
			t.Fatalf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestBoltCreate(t *testing.T) {
	ctx := context.Background()
	s := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	if err := s.Create(ctx, segment.Tag{Name: "a", Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	// MaxID 0 means Leaf's default first ID 1.
	if got, err := s.Allocate(ctx, "a", 0); err != nil || got.MaxID != 11 {
		t.Fatalf("Allocate: got %+v, %v, want MaxID 11", got, err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "a", Step: 10}); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("second Create: got %v, want ErrTagExists", err)
	}
	if _, err := s.Allocate(ctx, "missing", 0); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Allocate unknown: got %v, want ErrUnknownTag", err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "z", MaxID: 100, Step: 1}); err != nil {
		t.Fatalf("Create z: %v", err)
	}
	tags, err := s.Tags(ctx)
	if err != nil {
		t.Fatalf("Tags: %v", err)
	}
	if got, want := strings.Join(tags, ","), "a,z"; got != want {
		t.Fatalf("Tags: got %s, want %s", got, want)
	}
}

func TestBoltCreateValidation(t *testing.T) {
	ctx := context.Background()
	s := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	tests := []struct {
		name string
		tag  segment.Tag
		want error
	}{
		{name: "empty name", tag: segment.Tag{Name: "", Step: 1}, want: segment.ErrInvalidTag},
		{name: "long name", tag: segment.Tag{Name: strings.Repeat("x", 129), Step: 1}, want: segment.ErrInvalidTag},
		{name: "space in name", tag: segment.Tag{Name: "a b", Step: 1}, want: segment.ErrInvalidTag},
		{name: "control char", tag: segment.Tag{Name: "a\x00", Step: 1}, want: segment.ErrInvalidTag},
		{name: "zero step", tag: segment.Tag{Name: "t", Step: 0}, want: segment.ErrLimit},
		{name: "negative step", tag: segment.Tag{Name: "t", Step: -5}, want: segment.ErrLimit},
		{name: "step above int(11)", tag: segment.Tag{Name: "t", Step: math.MaxInt32 + 1}, want: segment.ErrLimit},
		{name: "negative first id", tag: segment.Tag{Name: "t", MaxID: -1, Step: 1}, want: segment.ErrLimit},
		{name: "first id overflows", tag: segment.Tag{Name: "t", MaxID: math.MaxInt64 - 5, Step: 10}, want: segment.ErrLimit},
		{name: "long description", tag: segment.Tag{Name: "t", Step: 1, Description: strings.Repeat("é", 257)}, want: segment.ErrLimit},
		{name: "max name and description", tag: segment.Tag{Name: strings.Repeat("x", 128), Step: 1, Description: strings.Repeat("é", 256)}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Create(ctx, tt.tag)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestBoltAllocateOverflow(t *testing.T) {
	ctx := context.Background()
	s := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	if err := s.Create(ctx, segment.Tag{Name: "big", MaxID: math.MaxInt64 - 100, Step: 60}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	a, err := s.Allocate(ctx, "big", 0)
	if err != nil || a.MaxID != math.MaxInt64-40 {
		t.Fatalf("Allocate: got %+v, %v, want MaxID %d", a, err, int64(math.MaxInt64-40))
	}
	if _, err := s.Allocate(ctx, "big", 0); !errors.Is(err, segment.ErrLimit) {
		t.Fatalf("overflowing Allocate: got %v, want ErrLimit", err)
	}
	// The failed allocation left the row alone.
	a, err = s.Allocate(ctx, "big", 40)
	if err != nil || a.MaxID != math.MaxInt64 {
		t.Fatalf("Allocate to the top: got %+v, %v, want MaxID %d", a, err, int64(math.MaxInt64))
	}
}

func TestBoltCanceledContext(t *testing.T) {
	s := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Allocate(ctx, "x", 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestBoltMarks(t *testing.T) {
	open := map[string]func(t *testing.T, path string) segment.Marks{
		"BoltStore": func(t *testing.T, path string) segment.Marks { return openTestBolt(t, path) },
		"MarkFile": func(t *testing.T, path string) segment.Marks {
			m, err := OpenMarkFile(path)
			if err != nil {
				t.Fatalf("OpenMarkFile: %v", err)
			}
			t.Cleanup(func() { _ = m.Close() })
			return m
		},
	}
	for name, openFn := range open {
		t.Run(name, func(t *testing.T) {
			m := openFn(t, filepath.Join(t.TempDir(), "marks.db"))
			steps := []struct {
				name  string
				raise int64
				want  int64
			}{
				{name: "none yet", raise: 0, want: 0},
				{name: "first", raise: 1000, want: 1000},
				{name: "higher", raise: 5000, want: 5000},
				{name: "lower is ignored", raise: 2000, want: 5000},
				{name: "equal", raise: 5000, want: 5000},
				{name: "negative is ignored", raise: -1, want: 5000},
			}
			for _, st := range steps {
				if st.raise != 0 {
					if err := m.Raise("t", st.raise); err != nil {
						t.Fatalf("%s: Raise: %v", st.name, err)
					}
				}
				got, err := m.Mark("t")
				if err != nil {
					t.Fatalf("%s: Mark: %v", st.name, err)
				}
				if got != st.want {
					t.Fatalf("%s: got mark %d, want %d", st.name, got, st.want)
				}
			}
			if got, err := m.Mark("other"); err != nil || got != 0 {
				t.Fatalf("other tag: got %d, %v, want 0", got, err)
			}
			if err := m.Raise("", 1); !errors.Is(err, segment.ErrInvalidTag) {
				t.Fatalf("Raise empty tag: got %v, want ErrInvalidTag", err)
			}
			// AllMarks: every mark, by tag name, as Mark reads them.
			if err := m.Raise("a", 7); err != nil {
				t.Fatal(err)
			}
			all, err := m.AllMarks()
			if want := []segment.Mark{{Tag: "a", End: 7}, {Tag: "t", End: 5000}}; err != nil || !slices.Equal(all, want) {
				t.Fatalf("AllMarks: got %v, %v; want %v", all, err, want)
			}
		})
	}
}

func TestBoltMarksConcurrent(t *testing.T) {
	s := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				if err := s.Raise("t", int64(i*8+g)); err != nil {
					t.Errorf("Raise: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got, err := s.Mark("t"); err != nil || got != 19*8+7 {
		t.Fatalf("got %d, %v, want %d", got, err, 19*8+7)
	}
}

func TestBoltPersistence(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "data", "leafd.db") // parent dir created by OpenBolt
	s, err := OpenBolt(path, BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "p", MaxID: 10, Step: 100}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := s.Allocate(ctx, "p", 0); err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if err := s.Raise("p", 110); err != nil {
		t.Fatalf("Raise: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	s = openTestBolt(t, path)
	a, err := s.Allocate(ctx, "p", 0)
	if err != nil || a != (segment.Alloc{MaxID: 210, Step: 100}) {
		t.Fatalf("Allocate after reopen: got %+v, %v, want {210 100}", a, err)
	}
	if got, err := s.Mark("p"); err != nil || got != 110 {
		t.Fatalf("Mark after reopen: got %d, %v, want 110", got, err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "p", Step: 1}); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("Create after reopen: got %v, want ErrTagExists", err)
	}
}

func TestBoltSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "leafd.db")
	openTestBolt(t, path)

	t.Run("same process", func(t *testing.T) {
		start := time.Now()
		_, err := OpenBolt(path, BoltOptions{LockTimeout: 200 * time.Millisecond})
		checkBoltLockedErr(t, err, dir)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("second open took %v, want about the lock timeout", d)
		}
		_, err = OpenMarkFile(path)
		checkBoltLockedErr(t, err, dir)
	})

	t.Run("other process", func(t *testing.T) {
		out, err := boltChild(t, "open", path).CombinedOutput()
		if err == nil {
			t.Fatalf("child opened a locked file; output:\n%s", out)
		}
		if !strings.Contains(string(out), "is in use by another leafd process (bolt file locked)") {
			t.Fatalf("child output:\n%s\nwant the in-use error", out)
		}
	})
}

func checkBoltLockedErr(t *testing.T, err error, dir string) {
	t.Helper()
	if err == nil {
		t.Fatal("second open succeeded, want an in-use error")
	}
	want := "data dir " + dir + " is in use by another leafd process (bolt file locked)"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("got %q, want it to contain %q", err, want)
	}
}

// Child processes for the tests above. The test binary re-executes itself with
// LEAFD_BOLT_CHILD=<mode> and runs only TestBoltChild.
const boltChildEnv = "LEAFD_BOLT_CHILD"

func boltChild(t *testing.T, mode, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBoltChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), boltChildEnv+"="+mode, "LEAFD_BOLT_CHILD_PATH="+path)
	return cmd
}

func TestBoltChild(t *testing.T) {
	mode := os.Getenv(boltChildEnv)
	if mode == "" {
		t.Skip("helper process for the bolt crash and lock tests")
	}
	path := os.Getenv("LEAFD_BOLT_CHILD_PATH")
	s, err := OpenBolt(path, BoltOptions{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	if mode != "crash" {
		os.Exit(0)
	}
	// Allocate forever with varying steps; print each range only after Allocate returned (and
	// each mark only after Raise returned), unbuffered, so that whatever the parent reads was
	// committed before the kill.
	ctx := context.Background()
	for i := int64(0); ; i++ {
		step := int64(0)
		if i%3 == 1 {
			step = 1 + i%7
		}
		a, err := s.Allocate(ctx, "crash", step)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		if step <= 0 {
			step = a.Step
		}
		fmt.Fprintf(os.Stdout, "A %d %d\n", a.MaxID-step, a.MaxID)
		if err := s.Raise("crash", a.MaxID); err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		fmt.Fprintf(os.Stdout, "M %d\n", a.MaxID)
	}
}

// TestBoltCrash kills an allocating process with SIGKILL at random moments and checks that
// no range it reported is ever handed out again and no reported mark is lost.
func TestBoltCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leafd.db")
	s, err := OpenBolt(path, BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "crash", MaxID: 1, Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	type span struct{ lo, hi int64 }
	var all []span
	var maxEnd, maxMark int64
	for round := range 6 {
		cmd := boltChild(t, "crash", path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child: %v", err)
		}
		// Wait for the first line so every round kills a process that is mid-loop.
		r := bufio.NewReader(stdout)
		first, err := r.ReadString('\n')
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: child produced no output: %v", round, err)
		}
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("kill: %v", err)
		}
		rest, _ := io.ReadAll(r)
		_ = cmd.Wait()

		lines := strings.Split(first+string(rest), "\n")
		// The last element is empty or a line cut by the kill: ignore it.
		lines = lines[:len(lines)-1]
		var n int
		for _, ln := range lines {
			f := strings.Fields(ln)
			switch {
			case len(f) == 3 && f[0] == "A":
				lo, _ := strconv.ParseInt(f[1], 10, 64)
				hi, _ := strconv.ParseInt(f[2], 10, 64)
				if lo < maxEnd {
					t.Fatalf("round %d: range [%d,%d) starts below an earlier range end %d", round, lo, hi, maxEnd)
				}
				all = append(all, span{lo, hi})
				maxEnd = hi
				n++
			case len(f) == 2 && f[0] == "M":
				m, _ := strconv.ParseInt(f[1], 10, 64)
				maxMark = max(maxMark, m)
			default:
				t.Fatalf("round %d: unexpected child line %q", round, ln)
			}
		}
		t.Logf("round %d: %d ranges before SIGKILL, highest end %d", round, n, maxEnd)
	}

	s = openTestBolt(t, path)
	a, err := s.Allocate(ctx, "crash", 0)
	if err != nil {
		t.Fatalf("Allocate after crashes: %v", err)
	}
	if lo := a.MaxID - a.Step; lo < maxEnd {
		t.Fatalf("range [%d,%d) after crashes reuses IDs below %d", lo, a.MaxID, maxEnd)
	}
	if m, err := s.Mark("crash"); err != nil || m < maxMark {
		t.Fatalf("Mark after crashes: got %d, %v, want >= %d", m, err, maxMark)
	}
	if len(all) < 6 {
		t.Fatalf("only %d ranges observed, want at least one per round", len(all))
	}
}

func TestBoltRows(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s, err := OpenBolt(filepath.Join(t.TempDir(), "leafd.db"), BoltOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	defer s.Close()
	if err := s.Create(ctx, segment.Tag{Name: "b", MaxID: 5, Step: 10, Description: "bee"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "a", Step: 3}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	now = now.Add(time.Minute)
	if _, err := s.Allocate(ctx, "b", 0); err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	rows, err := s.Rows(ctx)
	if err != nil {
		t.Fatalf("Rows: %v", err)
	}
	want := []segment.Tag{
		{Name: "a", MaxID: 1, Step: 3, UpdateTime: now.Add(-time.Minute)},
		{Name: "b", MaxID: 15, Step: 10, Description: "bee", UpdateTime: now},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		if !rows[i].UpdateTime.Equal(want[i].UpdateTime) {
			t.Fatalf("row %d: got update time %v, want %v", i, rows[i].UpdateTime, want[i].UpdateTime)
		}
		rows[i].UpdateTime, want[i].UpdateTime = time.Time{}, time.Time{}
		if rows[i] != want[i] {
			t.Fatalf("row %d: got %+v, want %+v", i, rows[i], want[i])
		}
	}
}

// TestPairMarks: leafd.db and marks.db carry one pairing id. A store file holding tags beside
// a marks file that is missing, new, or of another store file is refused (ErrUnpairedMarks)
// unless forced; the upgrades from data dirs of earlier versions (marks.db without pairing,
// marks inside leafd.db) and a store file from before the pairing beside a paired marks file
// pair without question.
func TestPairMarks(t *testing.T) {
	ctx := context.Background()
	type files struct {
		st *BoltStore
		mk *MarkFile
	}
	open := func(dir string) (files, bool) {
		t.Helper()
		st, err := OpenBolt(filepath.Join(dir, "leafd.db"), BoltOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, serr := os.Stat(filepath.Join(dir, "marks.db"))
		mk, err := OpenMarkFile(filepath.Join(dir, "marks.db"))
		if err != nil {
			t.Fatal(err)
		}
		return files{st, mk}, serr == nil
	}
	closeAll := func(f files) { _ = f.mk.Close(); _ = f.st.Close() }
	pair := func(dir string, force bool) error {
		t.Helper()
		f, existed := open(dir)
		defer closeAll(f)
		_, err := PairMarks(f.st, f.mk, existed, force)
		return err
	}
	withTag := func(t *testing.T, legacyMark bool) string {
		dir := t.TempDir()
		f, _ := open(dir)
		if err := f.st.Create(ctx, segment.Tag{Name: "a", MaxID: 1, Step: 10}); err != nil {
			t.Fatal(err)
		}
		if legacyMark { // a version before marks.db kept the marks in leafd.db
			if err := f.st.Raise("a", 11); err != nil {
				t.Fatal(err)
			}
		}
		closeAll(f)
		return dir
	}
	rmMarks := func(dir string) {
		if err := os.Remove(filepath.Join(dir, "marks.db")); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("fresh, then paired", func(t *testing.T) {
		dir := t.TempDir()
		if err := pair(dir, false); err != nil {
			t.Fatalf("fresh data dir: %v", err)
		}
		f, _ := open(dir)
		if err := f.st.Create(ctx, segment.Tag{Name: "a", MaxID: 1, Step: 10}); err != nil {
			t.Fatal(err)
		}
		closeAll(f)
		if err := pair(dir, false); err != nil {
			t.Fatalf("paired files: %v", err)
		}
	})
	t.Run("marks.db deleted", func(t *testing.T) {
		dir := withTag(t, false)
		if err := pair(dir, false); err != nil {
			t.Fatal(err)
		}
		rmMarks(dir)
		if err := pair(dir, false); !errors.Is(err, ErrUnpairedMarks) {
			t.Fatalf("marks.db deleted: got %v, want ErrUnpairedMarks", err)
		}
		if err := pair(dir, true); err != nil {
			t.Fatalf("forced: %v", err)
		}
		if err := pair(dir, false); err != nil {
			t.Fatalf("after the forced pairing: %v", err)
		}
	})
	t.Run("marks.db of another store file", func(t *testing.T) {
		a, b := withTag(t, false), withTag(t, false)
		if err := pair(a, false); err != nil {
			t.Fatal(err)
		}
		if err := pair(b, false); err != nil {
			t.Fatal(err)
		}
		copyFile(t, filepath.Join(b, "marks.db"), filepath.Join(a, "marks.db"))
		if err := pair(a, false); !errors.Is(err, ErrUnpairedMarks) {
			t.Fatalf("marks.db of another data dir: got %v, want ErrUnpairedMarks", err)
		}
	})
	t.Run("unpaired leafd.db with tags, marks.db missing", func(t *testing.T) {
		dir := withTag(t, false)
		rmMarks(dir) // the previous version's data dir rebuilt from leafd.db alone
		if err := pair(dir, false); !errors.Is(err, ErrUnpairedMarks) {
			t.Fatalf("got %v, want ErrUnpairedMarks", err)
		}
	})
	t.Run("upgrade: both files of the previous version", func(t *testing.T) {
		if err := pair(withTag(t, false), false); err != nil {
			t.Fatalf("marks.db beside leafd.db, neither paired: %v", err)
		}
	})
	t.Run("upgrade: marks inside leafd.db", func(t *testing.T) {
		dir := withTag(t, true)
		rmMarks(dir) // a version before marks.db had none
		if err := pair(dir, false); err != nil {
			t.Fatalf("legacy marks in leafd.db, no marks.db: %v", err)
		}
	})
	t.Run("leafd.db from before the pairing beside a paired marks.db", func(t *testing.T) {
		dir := withTag(t, false)
		copyFile(t, filepath.Join(dir, "leafd.db"), filepath.Join(dir, "old.db"))
		if err := pair(dir, false); err != nil {
			t.Fatal(err)
		}
		copyFile(t, filepath.Join(dir, "old.db"), filepath.Join(dir, "leafd.db"))
		if err := pair(dir, false); err != nil {
			t.Fatalf("restored unpaired leafd.db beside its marks.db (the marks catch it): %v", err)
		}
	})
}

// Every call of the embedded store returns on its context's deadline, even while another
// transaction holds bbolt's writer lock (bbolt cannot cancel; the call stops waiting).
func TestBoltCallsHonourContext(t *testing.T) {
	st := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	if err := st.Create(t.Context(), segment.Tag{Name: "a", Step: 10}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_ = st.db.Update(func(*bolt.Tx) error { close(held); <-release; return nil })
	}()
	<-held
	defer close(release)
	for name, call := range map[string]func(ctx context.Context) error{
		"Allocate":   func(ctx context.Context) error { _, err := st.Allocate(ctx, "a", 0); return err },
		"Create":     func(ctx context.Context) error { return st.Create(ctx, segment.Tag{Name: "b", Step: 10}) },
		"RaiseMaxID": func(ctx context.Context) error { _, _, err := st.RaiseMaxID(ctx, "a", 100); return err },
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s with the writer lock held: %v, want the deadline", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return on its context's deadline", name)
		}
		cancel()
	}
}
