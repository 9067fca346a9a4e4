package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// libfaketime is where Debian's libfaketime package puts the library.
const libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

// FakeTime is a wall-clock offset for child processes started with its Env (libfaketime;
// e.g. StartMariaDBEnv), changed at run time by Set: every clock read of the child reads the
// file again (FAKETIME_NO_CACHE). Monotonic clocks are left real, as an NTP step leaves
// them. Go binaries read the clock through the vDSO: libfaketime cannot move them.
type FakeTime struct {
	t    testing.TB
	path string
}

// NewFakeTime returns an offset of 0. A missing libfaketime skips the test, or fails it under
// CI or LEAFD_TEST_REQUIRE.
func NewFakeTime(t testing.TB) *FakeTime {
	t.Helper()
	if _, err := os.Stat(libfaketime); err != nil {
		missing(t, "libfaketime not found at %s (install the libfaketime package)", libfaketime)
	}
	f := &FakeTime{t: t, path: filepath.Join(t.TempDir(), "faketime")}
	f.Set(0)
	return f
}

// Env is the environment that puts a child under this offset.
func (f *FakeTime) Env() []string {
	return []string{"LD_PRELOAD=" + libfaketime, "FAKETIME_TIMESTAMP_FILE=" + f.path, "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"}
}

// Set makes the children's wall clock run offset from the real one (a step when it changes).
// The file is replaced whole, so no child reads it half written.
func (f *FakeTime) Set(offset time.Duration) {
	f.t.Helper()
	v := strconv.FormatFloat(offset.Seconds(), 'f', 3, 64)
	if offset >= 0 {
		v = "+" + v
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(v+"\n"), 0o644); err != nil {
		f.t.Fatalf("testenv: faketime: %v", err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		f.t.Fatalf("testenv: faketime: %v", err)
	}
}
