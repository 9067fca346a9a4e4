package snowflake

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// LocalStateFile is the name, in the data dir, of the file that FileSource and StaticSource keep
// their worker id and reserved_until in. Both use the same file, so switching between them keeps
// the time bound.
const LocalStateFile = statefile.Name

// ErrLocked: the data dir's state file is held by another process (or another source in this
// one).
var ErrLocked = statefile.ErrLocked

// ErrLayoutChanged (wrapped): the data dir or the worker-id domain was used with another epoch
// or bit layout. It fails the start.
var ErrLayoutChanged = statefile.ErrLayoutChanged

var (
	_ WorkerSource = (*FileSource)(nil)
	_ WorkerSource = (*StaticSource)(nil)
)

// FileSource is the embedded default: the worker id lives in <data-dir>/snowflake.json, with
// reserved_until. On first start (no file) the id is the configured first id (0 by default); then
// the file's id is used. The file is locked (flock) while the source is open, so two processes
// cannot share a data dir; it is only safe if no other instance in the worker-id domain uses the
// same id (one machine, or ids assigned by hand).
type FileSource struct{ localSource }

// NewFileSource opens and locks <dataDir>/snowflake.json. firstWorkerID is used only when the file
// does not exist yet. A second open of the same dir fails with ErrLocked.
func NewFileSource(dataDir string, firstWorkerID int64) (*FileSource, error) {
	if firstWorkerID < 0 {
		return nil, fmt.Errorf("snowflake: worker id %d is negative", firstWorkerID)
	}
	f, err := statefile.Open(filepath.Join(dataDir, LocalStateFile))
	if err != nil {
		return nil, err
	}
	return &FileSource{localSource{f: f, id: firstWorkerID, static: false, name: "file"}}, nil
}

// StaticSource uses a worker id given by the operator (--worker-id). The time bound is still
// persisted in <data-dir>/snowflake.json (locked like FileSource's), so a restart with a clock
// that went back does not repeat IDs. Uniqueness of the id across instances is the operator's
// responsibility.
type StaticSource struct{ localSource }

// NewStaticSource opens and locks <dataDir>/snowflake.json for worker id workerID. A bound left in
// the file by another id is honoured too (it costs at most one lease window on start).
func NewStaticSource(dataDir string, workerID int64) (*StaticSource, error) {
	if workerID < 0 {
		return nil, fmt.Errorf("snowflake: worker id %d is negative", workerID)
	}
	f, err := statefile.Open(filepath.Join(dataDir, LocalStateFile))
	if err != nil {
		return nil, err
	}
	return &StaticSource{localSource{f: f, id: workerID, static: true, name: "static"}}, nil
}

// localSource implements FileSource and StaticSource.
type localSource struct {
	f        *statefile.File
	id       int64
	static   bool
	name     string
	acquired bool
}

func (s *localSource) Acquire(ctx context.Context) (Worker, error) {
	s.f.Lock()
	defer s.f.Unlock()
	if s.f.Closed() {
		return Worker{}, errors.New("snowflake: source closed")
	}
	st, ok, err := s.f.Read()
	if err != nil {
		return Worker{}, err
	}
	if err := s.f.CheckLayout(st); err != nil {
		return Worker{}, err
	}
	w := Worker{ID: s.id, Source: s.name}
	if ok {
		// The file source keeps the id of an earlier static or file run; an id written by the
		// ZooKeeper source belongs to ZooKeeper's domain and is not taken.
		if !s.static && (st.Source == "file" || st.Source == "static") {
			w.ID = st.WorkerID
		}
		// The bound is the data dir's, whichever source wrote it (see snowflake/internal/statefile/bound.go).
		if st.ReservedUntilMs > 0 {
			w.Bound = time.UnixMilli(st.ReservedUntilMs).UTC()
			w.BoundCause = "reserved_until of the data dir's " + LocalStateFile
		}
	}
	// Record the id now so that a first start's id survives a crash before the first Extend.
	if !ok || st.WorkerID != w.ID || st.Source != s.name || st.Layout == nil {
		st = statefile.State{WorkerID: w.ID, Source: s.name, ReservedUntilMs: st.ReservedUntilMs}
		if err := s.f.Write(st); err != nil {
			return Worker{}, err
		}
	}
	s.id, s.acquired = w.ID, true
	return w, nil
}

func (s *localSource) Extend(ctx context.Context, until time.Time) error {
	s.f.Lock()
	defer s.f.Unlock()
	if s.f.Closed() {
		return errors.New("snowflake: source closed")
	}
	if !s.acquired {
		return errors.New("snowflake: Extend before Acquire")
	}
	return s.f.Write(statefile.State{WorkerID: s.id, ReservedUntilMs: until.UnixMilli(), Source: s.name})
}

// Close releases the lock. It is idempotent.
func (s *localSource) Close() error { return s.f.Close() }
