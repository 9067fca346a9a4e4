package main

// Shaped tags through graceful restarts on the built binary: the remainder file resumes
// counter rows, which must neither pile up across periods nor be served as plain tags.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// setFlag sets --name value in l's arguments for the next (re)start.
func setFlag(l *e2e.Leafd, name, value string) {
	for i, a := range l.Args {
		if a == name && i+1 < len(l.Args) {
			l.Args[i+1] = value
			return
		}
	}
	l.Args = append(l.Args, name, value)
}

func heldRows(t *testing.T, l *e2e.Leafd, tag string) []string {
	t.Helper()
	v, err := l.Do("IDS.TAGS")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range v.([]any) {
		if s := fmt.Sprint(x); strings.HasPrefix(s, tag+"@") {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// TestShapedRestartsAcrossPeriods: 5 graceful restarts, each into the next day
// (--period-clock-offset), with IDs taken every day: each day starts at 1 with its date, the
// day the remainder was saved in is retired, and 1 row is held at the end (not one per
// restart). A restart within the day serves the resumed row: no ID of it lost.
func TestShapedRestartsAcrossPeriods(t *testing.T) {
	t.Parallel()
	for name, args := range remainderStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := e2e.Start(t, append(args(t), "--period-clock-offset", "0s")...)
			if _, err := l.Do("IDS.CREATE", "r", "FORMAT", "R{yyyyMMdd}{seq:6}", "RESET", "day", "STEP", "100"); err != nil {
				t.Fatal(err)
			}
			next := func() string {
				t.Helper()
				v, err := l.Do("IDS.NEXT", "r")
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprint(v)
			}
			day := func(k int) string { return time.Now().UTC().AddDate(0, 0, k).Format("20060102") }
			for i := 1; i <= 3; i++ {
				if got, want := next(), fmt.Sprintf("R%s%06d", day(0), i); got != want {
					t.Fatalf("got %s, want %s", got, want)
				}
			}
			// Within the day: the resumed row is served, the next ID is 4.
			if err := l.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			l.Restart()
			if got, want := next(), fmt.Sprintf("R%s%06d", day(0), 4); got != want {
				t.Fatalf("after a restart within the day: got %s, want %s (the remainder served)", got, want)
			}
			for k := 1; k <= 5; k++ {
				if err := l.Stop(30 * time.Second); err != nil {
					t.Fatal(err)
				}
				setFlag(l, "--period-clock-offset", fmt.Sprintf("%dh", 24*k))
				l.Restart()
				for i := 1; i <= 2; i++ {
					if got, want := next(), fmt.Sprintf("R%s%06d", day(k), i); got != want {
						t.Fatalf("restart %d: got %s, want %s", k, got, want)
					}
				}
				if rows := heldRows(t, l, "r"); len(rows) != 1 || rows[0] != "r@"+day(k) {
					t.Fatalf("restart %d: held rows %v, want only r@%s", k, rows, day(k))
				}
			}
		})
	}
}

// TestOpaqueCounterRowAfterRestart: after a graceful restart resumed the counter row o@ of an
// OPAQUE tag, INCR, INCRBY, IDS.SEGMENT, IDS.NEXT and Leaf's HTTP API of o@ are SHAPED, on
// the instance with the key and after a restart without it; the tag itself still serves
// with the key.
func TestOpaqueCounterRowAfterRestart(t *testing.T) {
	t.Parallel()
	for name, args := range remainderStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			key := filepath.Join(t.TempDir(), "id.key")
			if err := os.WriteFile(key, []byte(strings.Repeat("ab", 16)), 0o600); err != nil {
				t.Fatal(err)
			}
			l := e2e.Start(t, append(args(t), "--id-key-file", key)...)
			if _, err := l.Do("IDS.CREATE", "o", "OPAQUE", "STEP", "100"); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Do("INCR", "o"); err != nil {
				t.Fatal(err)
			}
			refused := func(when string) {
				t.Helper()
				for _, cmd := range [][]any{{"INCR", "o@"}, {"INCRBY", "o@", 2}, {"IDS.SEGMENT", "o@", 3}, {"IDS.NEXT", "o@"}} {
					if v, err := l.Do(cmd...); err == nil || !strings.HasPrefix(err.Error(), "SHAPED") {
						t.Fatalf("%s: %v: got %v, %v; want SHAPED", when, cmd, v, err)
					}
				}
				if code, body, err := l.HTTPGet("/api/segment/get/o@", ""); err != nil || code < 400 || !strings.Contains(body, "SHAPED") {
					t.Fatalf("%s: HTTP of o@: %d %s %v; want an error naming SHAPED", when, code, body, err)
				}
			}
			refused("before a restart")
			for _, withKey := range []bool{true, false} {
				if err := l.Stop(30 * time.Second); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(l.Log(), "segment: remainder saved") {
					t.Fatalf("no remainder saved\n%s", e2e.Tail(l.Log(), 20))
				}
				if !withKey {
					i := slices.Index(l.Args, "--id-key-file")
					l.Args = slices.Delete(l.Args, i, i+2)
				}
				l.Restart()
				refused(fmt.Sprintf("after a restart (key: %v)", withKey))
				if withKey {
					if _, err := l.Do("INCR", "o"); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}
