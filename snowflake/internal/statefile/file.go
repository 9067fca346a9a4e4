// Package statefile is the data dir's snowflake state: one JSON file, <data-dir>/snowflake.json
// (Name), shared by every worker-id source (static, file, ZooKeeper) under one exclusive lock,
// whose reserved_until is the data dir's time bound (bound.go), and which records the ID layout
// (layout.go). The snowflake package's file and static sources and the snowflake/zk source use it.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Name is the state file's name in the data dir.
const Name = "snowflake.json"

// LegacyZKFile is the name, in the data dir, of the ZooKeeper cache of earlier versions. Its
// content is merged into the state file when the data dir is opened (see bound.go).
const LegacyZKFile = "snowflake-zk.json"

// ErrLocked: the local state file is held by another process (or another source in this one).
var ErrLocked = errors.New("snowflake: local state file is locked by another process")

// State is the JSON kept in a local state file. ReservedUntilMs is the lease bound in Unix
// milliseconds; the other fields say whose it is.
type State struct {
	WorkerID        int64  `json:"worker_id"`
	ReservedUntilMs int64  `json:"reserved_until"`
	Source          string `json:"source,omitempty"`
	Addr            string `json:"addr,omitempty"` // zookeeper: ip:port
	Name            string `json:"name,omitempty"` // zookeeper: cluster name
	// Servers and Chroot (zookeeper): the ensemble (sorted) and the chroot the id was held
	// in. With Name they are the worker-id domain; a start in another domain never serves the
	// cached id without ZooKeeper.
	Servers []string `json:"servers,omitempty"`
	Chroot  string   `json:"chroot,omitempty"`
	// Reuse (zookeeper): written by a run with worker reuse on, whose id a successor may take
	// over once it is gone. A takeover starts above the bound ZooKeeper confirmed plus the
	// holder's tolerance, so the outage start applies to such a cache as to any other.
	Reuse bool `json:"reuse,omitempty"`
	// ZKConfirmedMs (zookeeper): the highest reserved_until this data dir has written to
	// ZooKeeper's state node for WorkerID. Without ZooKeeper the instance never issues beyond
	// it plus the outage tolerance (see zk.Config.OutageTolerance).
	ZKConfirmedMs int64 `json:"zk_confirmed,omitempty"`
	// ToleranceMs (zookeeper): the outage tolerance the run that wrote ZKConfirmedMs announced
	// in ZooKeeper; a restart without ZooKeeper uses at most this.
	ToleranceMs int64 `json:"tolerance_ms,omitempty"`
	// Instance identifies the data dir: a random value made when the file is first created and
	// kept by every write, whatever the source. ZooKeeper claims carry it, so that a restart on
	// the same data dir recognises (and replaces) its own dead predecessor's claim, and nothing
	// else's. It is valid only in the Incarnation it was made in (bound.go): a data dir opened
	// in another boot or directory (copied, restored, moved, or after a reboot) gets a new one.
	Instance string `json:"instance,omitempty"`
	// Incarnation: the boot and the directory (device, inode) Instance was made in.
	Incarnation string `json:"incarnation,omitempty"`
	// Layout: the epoch and bit widths of the IDs issued on this data dir (layout.go).
	Layout *LayoutRec `json:"layout,omitempty"`
}

// File is a JSON state file guarded by an exclusive flock on "<path>.lock" (a separate file,
// because the state file itself is replaced by rename on every write). Writes are durable: temp
// file, fsync, rename, fsync of the directory.
type File struct {
	path     string
	mu       sync.Mutex
	lock     *os.File
	instance string     // the data dir's identity, written into every state (see State.Instance)
	incarn   string     // where and in which boot instance is valid (State.Incarnation)
	renewed  string     // why init made a new instance for an existing file ("" when it did not)
	want     *LayoutRec // the layout of this run (nil: none given); mu
	layout   *LayoutRec // the layout written into every state once checked; mu
}

// Open creates the directory of path if needed, takes the lock, merges a legacy ZooKeeper cache
// and gives the data dir its instance id.
func Open(path string) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("snowflake: data dir: %w", err)
	}
	lf, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("snowflake: open lock file: %w", err)
	}
	if err := lockFile(lf); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%w: %s (%v); is another leafd running on this data dir?", ErrLocked, path+".lock", err)
	}
	f := &File{path: path, lock: lf}
	if err := f.init(); err != nil {
		lf.Close()
		return nil, err
	}
	return f, nil
}

// Read returns the state; ok is false when the file does not exist.
func (f *File) Read() (st State, ok bool, err error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("snowflake: read %s: %w", f.path, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		// A corrupt file must not be mistaken for "no previous run": refuse.
		return State{}, false, fmt.Errorf("snowflake: %s is corrupt (fix or remove it by hand): %w", f.path, err)
	}
	return st, true, nil
}

// Write durably replaces the state. The data dir's instance id is always kept.
func (f *File) Write(st State) error {
	st.Instance, st.Incarnation = f.instance, f.incarn
	if f.layout != nil {
		st.Layout = f.layout
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, filepath.Base(f.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("snowflake: write %s: %w", f.path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("snowflake: write %s: %w", f.path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("snowflake: fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("snowflake: write %s: %w", f.path, err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("snowflake: rename to %s: %w", f.path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("snowflake: fsync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("snowflake: fsync dir %s: %w", dir, err)
	}
	return nil
}

// Lock and Unlock guard the file's state (the layout to check and write) and make a
// read-modify-write atomic with respect to Close. Read, Write and CheckLayout are called with it
// held.
func (f *File) Lock() { f.mu.Lock() }

// Unlock: see Lock.
func (f *File) Unlock() { f.mu.Unlock() }

// Closed reports whether Close ran; call it with the lock held.
func (f *File) Closed() bool { return f.lock == nil }

// Instance is the data dir's identity (see State.Instance).
func (f *File) Instance() string { return f.instance }

// Renewed says why Open gave an existing data dir a new instance id (copied, moved, restored or
// rebooted: see bound.go), or "" when it kept the recorded one.
func (f *File) Renewed() string { return f.renewed }

// SetWant sets the layout of this run, which CheckLayout compares with the recorded one; call it
// with the lock held.
func (f *File) SetWant(r *LayoutRec) { f.want = r }

// Want returns the layout given to SetWant (nil: none); call it with the lock held.
func (f *File) Want() *LayoutRec { return f.want }

// Close releases the lock. It is idempotent.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lock == nil {
		return nil
	}
	err := f.lock.Close() // releases the flock
	f.lock = nil
	return err
}
