package statefile

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// One time bound per data dir.
//
// Every worker-id source (static, file, ZooKeeper) keeps its state in the same file,
// <data-dir>/snowflake.json (Name), under the same lock. Its reserved_until is the
// data dir's time bound: whichever source wrote it, every later start on this data dir, with any
// source, issues only in milliseconds above it. So switching a data dir between sources (file →
// ZooKeeper, ZooKeeper → static, ...) cannot reissue the IDs of an earlier run, and two processes
// cannot use one data dir at the same time, whatever their sources.
//
// Earlier versions kept ZooKeeper's state in a separate file, snowflake-zk.json (LegacyZKFile),
// locked apart. On open its content is merged into snowflake.json (the higher bound wins) and
// the old file is removed.

// A data dir's instance id is valid in one incarnation: one boot of one host (the kernel's
// boot id), one directory (its device and inode) and one lock file (its inode: leafd never
// replaces it, while a restore by tar or rsync does). The lock proves that no other process
// uses this directory now, and the same boot and directory prove that the process that wrote
// the state is not running elsewhere: a copy of the directory (cp, rsync, a restored backup or
// volume snapshot, a cloned VM, which boots with a new boot id) carries the same files but
// opens in another incarnation. Such a data dir gets a new instance id at open, and the
// ZooKeeper outage fields of the old one are dropped: a copy is another instance, never its
// original's restart. Without a boot id (not Linux) every open is a new incarnation.

// init runs under the lock when the file is opened: merge the legacy ZooKeeper cache, and give
// the data dir its instance id.
func (f *File) init() error {
	st, ok, err := f.Read()
	if err != nil {
		return err
	}
	legacyPath := filepath.Join(filepath.Dir(f.path), LegacyZKFile)
	legacy, hasLegacy, err := readLegacy(legacyPath)
	if err != nil {
		return err
	}
	changed := false
	if hasLegacy {
		if !ok {
			st, ok = legacy, true
		} else {
			st.ReservedUntilMs = max(st.ReservedUntilMs, legacy.ReservedUntilMs)
		}
		changed = true
	}
	f.incarn = incarnation(filepath.Dir(f.path), f.lock)
	f.instance = st.Instance
	if f.instance == "" || f.incarn == "" || st.Incarnation != f.incarn {
		if ok {
			// The files were made elsewhere or in another boot: a copy (its original may be
			// running), a restore, a move, or this host rebooted. Nothing proves that the
			// process that wrote them is dead, so this is another instance, and what the
			// old one knew about ZooKeeper cannot serve without ZooKeeper (the outage start).
			f.renewed = fmt.Sprintf("recorded in %q, opened in %q", st.Incarnation, f.incarn)
			st.ZKConfirmedMs, st.ToleranceMs = 0, 0
		}
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		f.instance = hex.EncodeToString(b[:])
		changed = true
	}
	if changed {
		if !ok {
			// No earlier run: only the instance id. Source "" makes no source take its id.
			st = State{}
		}
		if err := f.Write(st); err != nil {
			return err
		}
	}
	if hasLegacy {
		if err := os.Remove(legacyPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("snowflake: remove %s after merging it into %s: %w", legacyPath, f.path, err)
		}
	}
	return nil
}

// readLegacy reads an old snowflake-zk.json; a corrupt one refuses like a corrupt state file.
func readLegacy(path string) (State, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("snowflake: read %s: %w", path, err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, false, fmt.Errorf("snowflake: %s is corrupt (fix or remove it by hand): %w", path, err)
	}
	if st.Source == "" {
		st.Source = "zookeeper"
	}
	return st, true, nil
}
