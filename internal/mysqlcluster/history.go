package mysqlcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
)

// HistoryFile is the name of History's file in the data dir.
const HistoryFile = "galera.json"

// persistEvery bounds how often a higher seqno alone is written to the file: a process
// killed at once may have read at most this much of the cluster's history since its last
// write. A new generation is written at once.
const persistEvery = 100 * time.Millisecond

// mark is what a process saw of one cluster (state UUID): the highest seqno under its
// latest generation.
type mark struct {
	Seqno int64 `json:"seqno"`
	Gen   int64 `json:"gen"`
}

// History is what this process saw of the Galera clusters behind its stores (File: also what
// earlier runs on the data dir saw): per state UUID the latest generation and the highest
// sequence number under it. A nil *History checks nothing.
//
// History is safe for concurrent use.
type History struct {
	path string // "" in memory only
	log  *zap.Logger
	now  func() time.Time

	mu        sync.Mutex // guards the fields below and the file
	seen      map[string]mark
	beginning map[string]int64 // per state UUID the generation this process is recording (begin)
	onGen     []func()         // OnGeneration
	dirty     bool
	wrote     time.Time
}

// OnGeneration registers f, called once each time this process learns of a new generation
// of a cluster (it begins one, or reads one recorded by another instance), before the
// statement that learned it returns. f must not call back into h. Nil h: nothing.
func (h *History) OnGeneration(f func()) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.onGen = append(h.onGen, f)
	h.mu.Unlock()
}

// notify calls the OnGeneration functions (h.mu not held).
func (h *History) notify() {
	h.mu.Lock()
	fs := h.onGen
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// OpenHistory loads the file at path (missing: nothing seen yet); path "" keeps the history
// in memory only. A file that cannot be read is an error: starting without it would forget
// what the data dir saw.
func OpenHistory(path string, log *zap.Logger) (*History, error) {
	if log == nil {
		log = zap.NewNop()
	}
	h := &History{path: path, log: log, now: time.Now, seen: map[string]mark{}, beginning: map[string]int64{}}
	if path == "" {
		return h, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &h.seen); err != nil {
		return nil, fmt.Errorf("%s: not a record of Galera sequence numbers (%v); restore it, or remove it to start as an instance that saw nothing (docs/MYSQL.md, \"Multi-writer clusters\")", path, err)
	}
	return h, nil
}

// Check compares st, the state the caller's statement read beside the identity id, with
// what was seen before. nil: the identity the statement read is the cluster's current one
// (or a single server). ErrGeneration: it is not, or a new generation was just recorded; the
// caller runs its transaction again (Retry does). ErrNotSynced, or another error: nothing may
// be decided on that member now.
//
// A lower seqno than the highest seen, or an older generation, is confirmed first by a causal
// read (src.Confirm: a member that only lags then shows at least what was seen), on a Synced member
// of the same cluster; confirmed, it is a restart from a member that lacked commits: the next
// generation is recorded (src.Begin: leafd_generation, which every identity includes), and
// logged.
func (h *History) Check(ctx context.Context, src Source, st State) error {
	if h == nil || st.UUID == "" {
		return nil
	}
	h.mu.Lock()
	m, ok := h.seen[st.UUID]
	switch {
	case !ok || st.Gen > m.Gen:
		learned := h.noteLocked(st.UUID, mark{st.Seqno, st.Gen}, ok)
		h.mu.Unlock()
		if learned {
			h.notify()
		}
		return nil
	case st.Gen == m.Gen && st.Seqno >= m.Seqno:
		h.raiseLocked(st.UUID, st.Seqno)
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()

	c, err := src.Confirm(ctx)
	if err != nil {
		return err
	}
	switch {
	case c.UUID != st.UUID:
		return ErrGeneration // another cluster answers now: the caller reads its identity again
	case c.Local != Synced:
		return fmt.Errorf("%w (seqno %d, state %d; seen %d)", ErrNotSynced, c.Seqno, c.Local, m.Seqno)
	}
	h.mu.Lock()
	m = h.seen[st.UUID] // may have moved meanwhile
	learned := false
	switch {
	case c.Gen > m.Gen:
		learned = h.noteLocked(st.UUID, mark{c.Seqno, c.Gen}, true)
	case c.Gen == m.Gen && c.Seqno >= m.Seqno:
		h.raiseLocked(st.UUID, c.Seqno) // the member lagged
	default:
		// Below what was seen, on a Synced member, after a causal wait: commits were lost.
		h.mu.Unlock()
		return h.begin(ctx, src, st.UUID, m, c)
	}
	cur := h.seen[st.UUID].Gen
	h.mu.Unlock()
	if learned {
		h.notify()
	}
	if st.Gen != cur {
		return ErrGeneration
	}
	return nil
}

// begin records the generation after m, found at the confirmed state c, and returns
// ErrGeneration (the caller's identity is the old one). One statement of this process records
// a generation; the others that found the same lower reading meanwhile return at once.
func (h *History) begin(ctx context.Context, src Source, uuid string, m mark, c State) error {
	next := max(m.Gen, c.Gen) + 1
	h.mu.Lock()
	if h.beginning[uuid] >= next || h.seen[uuid].Gen >= next {
		h.mu.Unlock()
		return ErrGeneration
	}
	h.beginning[uuid] = next
	h.mu.Unlock()
	why := fmt.Sprintf("wsrep_last_committed %d is below %d seen before", c.Seqno, m.Seqno)
	if c.Gen < m.Gen {
		why = fmt.Sprintf("generation %d is below %d seen before (seqno %d; seen %d)", c.Gen, m.Gen, c.Seqno, m.Seqno)
	}
	err := src.Begin(ctx, uuid, next, c.Seqno)
	h.mu.Lock()
	if h.beginning[uuid] == next {
		delete(h.beginning, uuid)
	}
	if err != nil {
		h.mu.Unlock()
		return fmt.Errorf("mysqlcluster: the Galera cluster %s was restarted from a member that lacked commits (%s); recording generation %d: %w", uuid, why, next, err)
	}
	// A later generation noted meanwhile (recorded by another instance) was logged and
	// notified by noteLocked; this one is announced here, once.
	announce := h.seen[uuid].Gen <= next
	if h.seen[uuid].Gen < next {
		h.seen[uuid] = mark{c.Seqno, next}
		h.dirty = true
		h.flushLocked(true)
	}
	h.mu.Unlock()
	if announce {
		h.log.Warn(msgBegins, zap.String("state_uuid", uuid), zap.String("reason", why), zap.Int64("generation", next), zap.Int64("seqno", c.Seqno))
		h.notify()
	}
	return ErrGeneration
}

// The log lines of a new generation: one per generation and process.
const (
	msgBegins   = "mysqlcluster: failover: the Galera cluster was restarted from a member that lacked commits; a new generation begins, which every store takes as another database (fence jump, lease settle)"
	msgRecorded = "mysqlcluster: failover: the Galera cluster is in a generation recorded by another instance (restarted from a member that lacked commits); every store takes it as another database"
)

// noteLocked records a generation seen for the first time (known: another one was known) and
// reports whether it is news to announce (h.notify): a new generation this process is not
// recording itself (begin announces that one).
func (h *History) noteLocked(uuid string, m mark, known bool) bool {
	h.seen[uuid] = m
	h.dirty = true
	h.flushLocked(true)
	if !known || h.beginning[uuid] >= m.Gen {
		return false
	}
	h.log.Warn(msgRecorded, zap.String("state_uuid", uuid), zap.Int64("generation", m.Gen), zap.Int64("seqno", m.Seqno))
	return true
}

func (h *History) raiseLocked(uuid string, seqno int64) {
	m := h.seen[uuid]
	if seqno <= m.Seqno {
		return
	}
	m.Seqno = seqno
	h.seen[uuid] = m
	h.dirty = true
	h.flushLocked(false)
}

// flushLocked writes the file when it is behind: at once when now, else at most every
// persistEvery. A failed write is logged and retried at the next change or at Close.
func (h *History) flushLocked(now bool) {
	if h.path == "" || !h.dirty || (!now && h.now().Sub(h.wrote) < persistEvery) {
		return
	}
	if err := h.writeLocked(now); err != nil {
		h.log.Warn("mysqlcluster: cannot write the record of Galera sequence numbers; a restarted instance may not notice a cluster restarted from a member that lacked commits", zap.String("path", h.path), zap.Error(err))
		return
	}
	h.dirty, h.wrote = false, h.now()
}

// writeLocked replaces the file by a temporary one renamed over it; sync makes it durable
// (a new generation; a higher seqno alone survives a crash of the process without it).
func (h *History) writeLocked(sync bool) error {
	b, err := json.Marshal(h.seen)
	if err != nil {
		return err
	}
	tmp := h.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, h.path); err != nil {
		return err
	}
	if sync {
		if d, err := os.Open(filepath.Dir(h.path)); err == nil {
			_ = d.Sync()
			_ = d.Close()
		}
	}
	return nil
}

// Close writes what is not written yet, durably. Idempotent.
func (h *History) Close() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.path == "" || !h.dirty {
		return nil
	}
	if err := h.writeLocked(true); err != nil {
		return err
	}
	h.dirty, h.wrote = false, h.now()
	return nil
}
