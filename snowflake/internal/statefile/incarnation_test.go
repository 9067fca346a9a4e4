package statefile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestIncarnation: the data dir's instance id is kept by a reopen of the same directory in the
// same boot, and renewed, with the ZooKeeper outage fields dropped, when the files are opened
// in another directory (a copy) or another boot (a reboot, a cloned VM) or when the boot is
// unknown. A renewed data dir is another instance: its cached worker id needs ZooKeeper.
func TestIncarnation(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot id on this system: every open renews (checked below by the unknown-boot case)")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, Name)
	f := mustOpen(t, path)
	inst := f.Instance()
	if err := f.Write(State{WorkerID: 3, ReservedUntilMs: 100, Source: "zookeeper", ZKConfirmedMs: 90, ToleranceMs: 5000}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	f = mustOpen(t, path)
	if f.Instance() != inst || f.Renewed() != "" {
		t.Fatalf("reopen of the same dir: instance %s (renewed %q), want %s kept", f.Instance(), f.Renewed(), inst)
	}
	st := mustRead(t, f)
	if st.ZKConfirmedMs != 90 || st.ToleranceMs != 5000 {
		t.Fatalf("reopen of the same dir dropped the outage fields: %+v", st)
	}
	f.Close()

	check := func(t *testing.T, f *File) {
		t.Helper()
		st := mustRead(t, f)
		if f.Instance() == inst || f.Renewed() == "" || st.Instance != f.Instance() {
			t.Fatalf("instance %s (renewed %q, file %s), want a new one, not %s", f.Instance(), f.Renewed(), st.Instance, inst)
		}
		if st.ZKConfirmedMs != 0 || st.ToleranceMs != 0 {
			t.Fatalf("renewed data dir kept the outage fields: %+v", st)
		}
		if st.WorkerID != 3 || st.ReservedUntilMs != 100 {
			t.Fatalf("renewed data dir lost its time bound or id: %+v", st)
		}
	}
	t.Run("copy", func(t *testing.T) {
		cp := t.TempDir()
		for _, n := range []string{Name, Name + ".lock"} {
			b, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cp, n), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f := mustOpen(t, filepath.Join(cp, Name))
		defer f.Close()
		check(t, f)
	})
	t.Run("files restored in place", func(t *testing.T) {
		// rsync over the data dir: same directory, every file (the lock file too) written
		// to a temporary name and renamed into place.
		lp := path + ".lock"
		if err := os.WriteFile(lp+".tmp", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(lp+".tmp", lp); err != nil {
			t.Fatal(err)
		}
		f := mustOpen(t, path)
		defer f.Close()
		check(t, f)
		inst = f.Instance()
		if err := f.Write(State{WorkerID: 3, ReservedUntilMs: 100, Source: "zookeeper", ZKConfirmedMs: 90, ToleranceMs: 5000}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("reboot", func(t *testing.T) {
		real := bootID
		bootID = func() string { return "another-boot" }
		defer func() { bootID = real }()
		f := mustOpen(t, path)
		defer f.Close()
		check(t, f)
		inst = f.Instance()
	})
	t.Run("file without an instance", func(t *testing.T) {
		// Written by a version before instance ids: nothing proves where it was written.
		dir := t.TempDir()
		b := []byte(`{"worker_id":3,"reserved_until":100,"source":"zookeeper","zk_confirmed":90,"tolerance_ms":5000}`)
		if err := os.WriteFile(filepath.Join(dir, Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		f := mustOpen(t, filepath.Join(dir, Name))
		defer f.Close()
		if st := mustRead(t, f); st.ZKConfirmedMs != 0 || st.ToleranceMs != 0 || f.Renewed() == "" {
			t.Fatalf("file without an instance kept the outage fields: %+v (renewed %q)", st, f.Renewed())
		}
	})
	t.Run("unknown boot", func(t *testing.T) {
		real := bootID
		bootID = func() string { return "" }
		defer func() { bootID = real }()
		for range 2 {
			f := mustOpen(t, path)
			if f.Instance() == inst {
				t.Fatalf("unknown boot: instance %s kept", inst)
			}
			inst = f.Instance()
			f.Close()
		}
	})
}

func mustOpen(t *testing.T, path string) *File {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustRead(t *testing.T, f *File) State {
	t.Helper()
	st, ok, err := f.Read()
	if err != nil || !ok {
		t.Fatalf("read: %v, %v", ok, err)
	}
	return st
}
