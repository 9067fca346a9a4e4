package segment

// The graceful-restart remainder (docs/SEGMENT.md, "Graceful restart: the remainder file").
//
// On a graceful shutdown, after the last reply, SaveRemainder takes each held tag's unissued
// rest (the current segment from its cursor, and a loaded next segment) and writes it to
// Config.RemainderFile durably (temp file, fsync, rename, fsync of the directory), bound to
// the store's identity and carrying a random token. The next New on that data dir serves from
// it first, after three fences:
//
//   - identity: the file's store id must be the store's (StoreID: the embedded store's
//     pairing id, a random id kept in MySQL's leafd_remainder);
//   - the store and marks check: each range must end at or below the store's max_id and the
//     local mark (the range is still this instance's), else it is discarded and counted;
//   - consume before serve: the token is recorded as consumed in the store, durably, before
//     any ID of the file is published (ConsumeRemainder: a bucket of leafd.db, a row of
//     leafd_remainder). A token already recorded means the file was served before: a restored
//     or copied data dir, or a file that outlived its removal; it is discarded whole. The file
//     is then removed (and the directory fsynced); a failure there is logged and harmless.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// RemainderStore is implemented by stores that can bind a remainder file to themselves and record
// its consumption (*boltstore.BoltStore, *mysqlstore.MySQLStore). A store without it gets no
// remainder file: its held ranges are a gap at each restart, as before.
//
// RemainderStore stays apart from Store, found on the store by type assertion: SaveRemainder
// refuses a store without it before taking any rest and without a store call (StoreID is
// asked only when there is something to save and the start did not read it already), so an
// ErrNotSupported answer would come too late to say so.
type RemainderStore interface {
	// StoreID identifies the store (not the server): stable across restarts and, for MySQL,
	// across a failover to a replica; different for another store.
	StoreID(ctx context.Context) (string, error)
	// ConsumeRemainder durably records token as consumed; ErrRemainderUsed when it already is.
	ConsumeRemainder(ctx context.Context, token string) error
	// Rows lists every row (the store check reads max_id of every tag of the file at once).
	Rows(ctx context.Context) ([]Tag, error)
}

// ErrRemainderUsed: the remainder file's token is already recorded as consumed in the store.
var ErrRemainderUsed = errors.New("segment: remainder file already consumed")

const remainderVersion = 1

// maxRemainderFile bounds the file read at start (100,000 tags of 128 bytes fit well below).
const maxRemainderFile = 64 << 20

// remainderFile is the JSON content of Config.RemainderFile.
type remainderFile struct {
	Version int            `json:"version"`
	Store   string         `json:"store"` // StoreID at save
	Token   string         `json:"token"` // random, 32 hex digits; consumed in the store
	Saved   time.Time      `json:"saved"`
	Tags    []remainderTag `json:"tags"`
}

// remainderTag is the unissued rest of one tag: one or two ranges [start, end), ascending.
type remainderTag struct {
	Tag    string     `json:"tag"`
	Ranges [][2]int64 `json:"ranges"`
}

func (t remainderTag) ids() int64 {
	var n int64
	for _, r := range t.Ranges {
		n += r[1] - r[0]
	}
	return n
}

func (f *remainderFile) ids() int64 {
	var n int64
	for _, t := range f.Tags {
		n += t.ids()
	}
	return n
}

// validate checks the shape of the file (what a hand edit or a foreign file could break).
func (f *remainderFile) validate() error {
	if f.Version != remainderVersion {
		return fmt.Errorf("version %d, want %d", f.Version, remainderVersion)
	}
	if f.Store == "" || len(f.Token) != 32 {
		return errors.New("no store id or token")
	}
	if _, err := hex.DecodeString(f.Token); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	seen := make(map[string]bool, len(f.Tags))
	for _, t := range f.Tags {
		if err := ValidateTag(t.Tag); err != nil {
			return err
		}
		if seen[t.Tag] {
			return fmt.Errorf("tag %q twice", t.Tag)
		}
		seen[t.Tag] = true
		if len(t.Ranges) == 0 || len(t.Ranges) > 2 {
			return fmt.Errorf("tag %q: %d ranges", t.Tag, len(t.Ranges))
		}
		prev := int64(0)
		for _, r := range t.Ranges {
			if r[0] < 1 || r[0] >= r[1] || r[1] > maxRangeEnd || r[0] < prev {
				return fmt.Errorf("tag %q: bad range [%d, %d)", t.Tag, r[0], r[1])
			}
			prev = r[1]
		}
	}
	return nil
}

// RemainderReport says what SaveRemainder wrote.
type RemainderReport struct {
	Tags int   // tags with a rest
	IDs  int64 // unissued IDs written
}

// SaveRemainder lets the loads already started end (within ctx), closes the generator
// (Close), takes every held tag's unissued rest and
// writes it durably to Config.RemainderFile, bound to the store. Call it after the last
// reply: a request still running gets no ID from what is taken (ErrUnavailable). With no
// RemainderFile configured it only closes. With nothing to save it writes nothing and leaves
// a file that the start could not consume (store down) in place.
func (g *Generator) SaveRemainder(ctx context.Context) (RemainderReport, error) {
	g.quiesce(ctx)
	_ = g.Close()
	if g.cfg.RemainderFile == "" {
		return RemainderReport{}, nil
	}
	rs, ok := g.store.(RemainderStore)
	if !ok {
		return RemainderReport{}, errors.New("segment: the store cannot bind a remainder file")
	}
	f := remainderFile{Version: remainderVersion, Saved: g.cfg.Clock.Now().UTC()}
	g.tags.each(func(b *buffer) bool {
		if t, ok := takeRest(b); ok {
			f.Tags = append(f.Tags, t)
		}
		return true
	})
	if len(f.Tags) == 0 {
		return RemainderReport{}, nil
	}
	rep := RemainderReport{Tags: len(f.Tags), IDs: f.ids()}
	id := g.storeID
	if id == "" {
		var err error
		if id, err = rs.StoreID(ctx); err != nil {
			return RemainderReport{}, fmt.Errorf("segment: remainder not saved (%d IDs of %d tags are a gap): store identity: %w", rep.IDs, rep.Tags, err)
		}
	}
	f.Store = id
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	f.Token = hex.EncodeToString(tok[:])
	data, err := json.Marshal(&f)
	if err != nil {
		return RemainderReport{}, err
	}
	if err := writeFileDurable(g.cfg.RemainderFile, data); err != nil {
		return RemainderReport{}, fmt.Errorf("segment: remainder not saved (%d IDs of %d tags are a gap): %w", rep.IDs, rep.Tags, err)
	}
	return rep, nil
}

// quiesce stops new loads and waits, within ctx, for those queued or running to end: a load
// cancelled by Close may still commit its lease (bbolt cannot cancel a transaction; a MySQL
// COMMIT may land), and that range would be a gap. A load that ends here publishes its
// segment as the next one, which goes into the file.
func (g *Generator) quiesce(ctx context.Context) {
	g.poolMu.Lock()
	g.closed.Store(true)
	g.poolMu.Unlock()
	g.tags.each(func(b *buffer) bool {
		b.mu.Lock()
		done := b.done
		b.mu.Unlock()
		if done != nil {
			select {
			case <-done:
			case <-ctx.Done():
				return false
			}
		}
		return true
	})
}

// takeRest takes b's unissued values out of b for good: the next segment leaves b (no load
// runs: the generator is closed), then the cursor of the current one jumps to its end in one
// atomic swap, so every value below the old cursor went to a taker and every value from it
// on goes to the file, none to both.
func takeRest(b *buffer) (remainderTag, bool) {
	b.mu.Lock()
	nx := b.next
	b.next = nil
	b.setFlagsLocked()
	cur := b.cur.Load() // stable now: only a switch to next replaces it, under b.mu
	b.mu.Unlock()
	t := remainderTag{Tag: b.tag}
	for _, s := range []*seg{cur, nx} {
		if s == nil {
			continue
		}
		if c := s.cursor.Swap(s.end); c < s.end {
			t.Ranges = append(t.Ranges, [2]int64{max(c, s.start), s.end})
		}
	}
	return t, len(t.Ranges) > 0
}

// writeFileDurable writes data to path so that after a crash path holds either its old
// content or data, complete: temp file in the same directory, fsync, rename, fsync of the
// directory.
func writeFileDurable(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*.tmp")
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		_ = os.Remove(name)
		return err
	}
	return syncDir(dir)
}

// removeDurable removes path and fsyncs its directory, so the removal survives a crash.
func removeDurable(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// resume serves the remainder file of the previous graceful shutdown, if any: called by New
// before the loaders, the warm start and any request. See the file comment for the fences.
// Whatever fails leaves no segment of the file published; a file that may still be valid (the
// store did not answer) is kept for the next start, anything else is removed.
func (g *Generator) resume(ctx context.Context) {
	path := g.cfg.RemainderFile
	if path == "" {
		return
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil && st.Size() > maxRemainderFile {
		err = fmt.Errorf("%d bytes, at most %d read", st.Size(), maxRemainderFile)
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(path)
	}
	var f remainderFile
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err == nil {
		err = f.validate()
	}
	if err != nil {
		g.discardRemainder(path, 0, "the remainder file cannot be read", zap.Error(err))
		return
	}
	rs, ok := g.store.(RemainderStore)
	if !ok {
		g.discardRemainder(path, f.ids(), "the store cannot bind a remainder file")
		return
	}
	id, err := rs.StoreID(ctx)
	if err != nil {
		g.log.Warn("segment: remainder file kept for the next start: the store identity cannot be read",
			zap.String("file", path), zap.Int64("ids", f.ids()), zap.Error(err))
		return
	}
	g.storeID = id
	if id != f.Store {
		g.discardRemainder(path, f.ids(), "the remainder file belongs to another store",
			zap.String("file_store", f.Store), zap.String("store", id))
		return
	}
	rows, err := rs.Rows(ctx)
	if err != nil {
		g.log.Warn("segment: remainder file kept for the next start: the store's max_id cannot be read",
			zap.String("file", path), zap.Int64("ids", f.ids()), zap.Error(err))
		return
	}
	maxID := make(map[string]int64, len(rows))
	for _, r := range rows {
		maxID[r.Name] = r.MaxID
	}
	var ordered map[string]bool
	if g.cfg.Ordered != nil {
		names, err := g.cfg.Ordered(ctx)
		if err != nil {
			g.log.Warn("segment: remainder file kept for the next start: the ordered tags cannot be listed",
				zap.String("file", path), zap.Int64("ids", f.ids()), zap.Error(err))
			return
		}
		ordered = make(map[string]bool, len(names))
		for _, n := range names {
			ordered[n] = true
		}
	}
	// The store and marks check: a range is still this instance's only when the store has
	// granted past it (max_id: no failover to a replica behind it, no restored table) and this
	// instance's durable mark ends exactly where the file does (its marks are not from before
	// the range, and nothing was leased here after it).
	type resumed struct {
		t    remainderTag
		mark int64
	}
	var keep []resumed
	var dropped int64
	for _, t := range f.Tags {
		end := t.Ranges[len(t.Ranges)-1][1]
		m, err := g.marks.Mark(t.Tag)
		mx, inStore := maxID[t.Tag]
		why := ""
		switch {
		case err != nil:
			why = "its mark cannot be read: " + err.Error()
		case !inStore:
			why = "the tag is not in the store"
		case ordered[t.Tag]:
			// Served as ordinary before the leases are known, its IDs could come below IDs
			// its leader issued meanwhile; a leader starts from a fresh range anyway.
			why = "an ordered tag is served only by its leader's new term"
		case end > mx:
			why = fmt.Sprintf("the store's max_id %d is below its end %d (a failover to a replica behind, or a restored table)", mx, end)
		case end > m:
			why = fmt.Sprintf("this instance's mark %d is below its end %d (marks.db restored or replaced)", m, end)
		case end < m:
			// The file is the top of what this instance was granted only if nothing was leased
			// after it was written: a start that could not consume it leased above it, and its
			// IDs would now come below IDs already issued here (order within the instance).
			why = fmt.Sprintf("this instance leased the tag up to %d after the file was written (its end %d); its IDs would come below IDs already issued", m, end)
		case len(keep) >= g.cfg.MaxTags:
			why = "too many tags"
		}
		if why != "" {
			dropped += t.ids()
			g.log.Warn("segment: remainder of a tag discarded: the range is no longer known to be this instance's",
				zap.String("tag", t.Tag), zap.Any("ranges", t.Ranges), zap.String("why", why))
			continue
		}
		keep = append(keep, resumed{t, m})
	}
	if len(keep) == 0 {
		g.discardRemainder(path, dropped, "no range of the remainder file passed the store check")
		return
	}
	// Consume before serve: durable in the store before any ID of the file is published.
	if err := rs.ConsumeRemainder(ctx, f.Token); err != nil {
		if errors.Is(err, ErrRemainderUsed) {
			g.discardRemainder(path, f.ids(), "the remainder file was consumed before (a restored or copied data dir?); not served again",
				zap.String("token", f.Token))
			return
		}
		g.log.Warn("segment: remainder file kept for the next start: its consumption cannot be recorded in the store",
			zap.String("file", path), zap.Int64("ids", f.ids()), zap.Error(err))
		return
	}
	g.stats.remainderDiscarded.Add(dropped)
	if err := removeDurable(path); err != nil {
		g.log.Warn("segment: the consumed remainder file could not be removed (it is refused if read again)",
			zap.String("file", path), zap.Error(err))
	}
	now := g.cfg.Clock.Now()
	var ids int64
	g.mu.Lock()
	for _, r := range keep {
		b, err := g.addLocked(r.t.Tag)
		if err != nil { // MaxTags was checked above; nothing else fails here
			g.stats.remainderDiscarded.Add(r.t.ids())
			continue
		}
		b.guard.mu.Lock()
		b.guard.mark = max(b.guard.mark, r.mark)
		b.guard.mu.Unlock()
		b.mu.Lock()
		g.firstLoadEndedLocked(b)
		rg := r.t.Ranges
		b.cur.Store(newSegLead(rg[0][0], rg[0][1], g.cfg.PreloadRatio, 0))
		if len(rg) > 1 {
			b.next = newSegLead(rg[1][0], rg[1][1], g.cfg.PreloadRatio, 0)
		}
		b.since = now
		b.mark = max(b.mark, r.mark)
		b.setFlagsLocked()
		b.mu.Unlock()
		ids += r.t.ids()
	}
	g.mu.Unlock()
	g.stats.remainderResumed.Add(ids)
	g.log.Info("segment: serving the remainder of the previous graceful shutdown first",
		zap.Int("tags", len(keep)), zap.Int64("ids", ids), zap.Int64("discarded_ids", dropped),
		zap.Time("saved", f.Saved))
}

// discardRemainder removes the remainder file, counts its IDs as discarded and logs why.
func (g *Generator) discardRemainder(path string, ids int64, why string, fields ...zap.Field) {
	g.stats.remainderDiscarded.Add(ids)
	fields = append([]zap.Field{zap.String("file", path), zap.Int64("ids", ids)}, fields...)
	g.log.Warn("segment: remainder file discarded: "+why, fields...)
	if err := removeDurable(path); err != nil {
		g.log.Warn("segment: the discarded remainder file could not be removed", zap.String("file", path), zap.Error(err))
	}
}
