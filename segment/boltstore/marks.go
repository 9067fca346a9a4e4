package boltstore

// The regression-guard marks in bbolt: MarkFile (<data-dir>/marks.db, beside either store)
// and the mark, hint and recent-tag records that BoltStore and MarkFile share; store.go keeps
// the embedded store's rows.

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leafd/leafd/segment"
)

// MarkFile holds only the regression-guard marks, in its own bbolt file (typically
// <data-dir>/marks.db); it is used beside the MySQL store, whose rows live in the database.
// It is locked against other processes like BoltStore and safe for concurrent use.
//
// With the embedded store too the marks live in their own file (not in leafd.db): a restored
// copy of leafd.db carries max_id values below the marks and is caught as a regression,
// while marks kept inside it would be restored with it.
type MarkFile struct {
	db    *bolt.DB
	group *boltGroup // raises: concurrent ones share a transaction (groupcommit.go)
	now   func() time.Time
}

// OpenMarkFile opens (creating if needed) the marks file at path with the default options.
func OpenMarkFile(path string) (*MarkFile, error) {
	opts, _ := BoltOptions{}.withDefaults()
	db, err := openBoltFile(path, opts, boltMarksBucket)
	if err != nil {
		return nil, err
	}
	return &MarkFile{db: db, group: newBoltGroup(db), now: opts.Now}, nil
}

// Mark returns the highest range end recorded for tag, 0 when none.
func (m *MarkFile) Mark(tag string) (int64, error) { return boltMark(m.db, tag) }

// Raise durably records end as the tag's mark unless the mark is already at or above it.
func (m *MarkFile) Raise(tag string, end int64) error { return boltRaise(m.group, tag, end, m.now) }

// RaiseHint raises the mark like Raise and records h, in one durable commit.
func (m *MarkFile) RaiseHint(tag string, end int64, h segment.Hint) error {
	return boltRaiseHint(m.group, tag, end, h, m.now)
}

// Hint returns the recorded Hint of tag, the zero Hint when none.
func (m *MarkFile) Hint(tag string) (segment.Hint, error) { return boltHint(m.db, tag) }

// RecentTags lists up to n tags with a mark, most recently raised first (the warm start).
func (m *MarkFile) RecentTags(n int) ([]string, error) { return boltRecent(m.db, n) }

// AllMarks lists every mark of the file, by tag name (IDS.MARKS, raise-max-id).
func (m *MarkFile) AllMarks() ([]segment.Mark, error) { return boltAll(m.db) }

// MarksAfter lists up to n marks whose tag sorts after the given one, by tag name (a page
// of IDS.MARKS).
func (m *MarkFile) MarksAfter(after string, n int) ([]segment.Mark, error) {
	return boltAfter(m.db, after, n)
}

// RaiseAll raises the marks of ms (never lowering one) in one durable commit per chunk of
// 100,000: the bulk form of Raise, for moving or restoring many marks at once.
func (m *MarkFile) RaiseAll(ms []segment.Mark) error {
	for len(ms) > 0 {
		chunk := ms[:min(len(ms), 100_000)]
		ms = ms[len(chunk):]
		err := m.group.update(context.Background(), func(tx *bolt.Tx) error {
			b := tx.Bucket(boltMarksBucket)
			at := uint64(m.now().UnixNano())
			for _, e := range chunk {
				if e.Tag == "" || len(e.Tag) > bolt.MaxKeySize {
					return fmt.Errorf("%w: %q", segment.ErrInvalidTag, e.Tag)
				}
				cur, err := decodeBoltMark(b.Get([]byte(e.Tag)))
				if err != nil {
					return fmt.Errorf("tag %q: %w", e.Tag, err)
				}
				if cur >= e.End {
					continue
				}
				var v [16]byte
				binary.BigEndian.PutUint64(v[:], uint64(e.End))
				binary.BigEndian.PutUint64(v[8:], at)
				if err := b.Put([]byte(e.Tag), v[:]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return boltWrap("raise all", err)
		}
	}
	return nil
}

// MigrateMarks raises the marks of to to those kept inside the embedded store file by
// earlier versions (which kept them there); marks are never lowered. It returns how many
// tags it read.
func MigrateMarks(from *BoltStore, to *MarkFile) (int, error) {
	all, err := boltAll(from.db)
	if err != nil {
		return 0, err
	}
	if err := to.RaiseAll(all); err != nil {
		return 0, err
	}
	return len(all), nil
}

// Close releases the file and its lock. It is idempotent.
func (m *MarkFile) Close() error {
	err := m.db.Close()
	m.group.wait()
	return err
}

// boltAll lists every mark of the marks bucket in key order. A corrupt mark is an error: the
// caller (the failover repair) must not take a tag it cannot read as having no mark.
func boltAll(db *bolt.DB) ([]segment.Mark, error) {
	var all []segment.Mark
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(boltMarksBucket).ForEach(func(k, v []byte) error {
			end, _, err := decodeBoltMarkTime(v)
			if err != nil {
				return fmt.Errorf("tag %q: %w", k, err)
			}
			all = append(all, segment.Mark{Tag: string(k), End: end})
			return nil
		})
	})
	if err != nil {
		return nil, boltWrap("all marks", err)
	}
	return all, nil
}

// boltAfter lists up to n marks of the marks bucket whose tag sorts after the given one, in
// key order, reading only those (a cursor seek): a page costs the same at any number of marks.
func boltAfter(db *bolt.DB, after string, n int) ([]segment.Mark, error) {
	out := make([]segment.Mark, 0, min(n, 1024))
	err := db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltMarksBucket).Cursor()
		k, v := c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, v = c.Next()
		}
		for ; k != nil && len(out) < n; k, v = c.Next() {
			end, _, err := decodeBoltMarkTime(v)
			if err != nil {
				return fmt.Errorf("tag %q: %w", k, err)
			}
			out = append(out, segment.Mark{Tag: string(k), End: end})
		}
		return nil
	})
	if err != nil {
		return nil, boltWrap("marks page", err)
	}
	return out, nil
}

// boltRecent lists up to n tags of the marks bucket, most recently raised first.
func boltRecent(db *bolt.DB, n int) ([]string, error) {
	type kv struct {
		tag string
		at  int64
	}
	var all []kv
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(boltMarksBucket).ForEach(func(k, v []byte) error {
			_, at, err := decodeBoltMarkTime(v)
			if err != nil {
				return nil // a corrupt mark shows on its tag's load; it is not worth warming
			}
			all = append(all, kv{string(k), at})
			return nil
		})
	})
	if err != nil {
		return nil, boltWrap("recent marks", err)
	}
	slices.SortFunc(all, func(a, b kv) int {
		if c := cmp.Compare(b.at, a.at); c != 0 {
			return c
		}
		return strings.Compare(a.tag, b.tag)
	})
	out := make([]string, 0, min(n, len(all)))
	for _, e := range all[:min(n, len(all))] {
		out = append(out, e.tag)
	}
	return out, nil
}

func boltMark(db *bolt.DB, tag string) (int64, error) {
	var mark int64
	err := db.View(func(tx *bolt.Tx) error {
		var err error
		mark, err = decodeBoltMark(tx.Bucket(boltMarksBucket).Get([]byte(tag)))
		return err
	})
	if err != nil {
		return 0, boltWrap("mark", fmt.Errorf("tag %q: %w", tag, err))
	}
	return mark, nil
}

// boltRaise reads first so that the common case (mark already high enough, e.g. a range
// re-granted after restart) costs no write and no fsync.
func boltRaise(g *boltGroup, tag string, end int64, now func() time.Time) error {
	if tag == "" || len(tag) > bolt.MaxKeySize {
		return fmt.Errorf("%w: %q", segment.ErrInvalidTag, tag)
	}
	cur, err := boltMark(g.db, tag)
	if err != nil {
		return err
	}
	if cur >= end {
		return nil
	}
	err = g.update(context.Background(), func(tx *bolt.Tx) error {
		b := tx.Bucket(boltMarksBucket)
		cur, err := decodeBoltMark(b.Get([]byte(tag)))
		if err != nil {
			return err
		}
		if cur >= end {
			return nil
		}
		var v [16]byte
		binary.BigEndian.PutUint64(v[:], uint64(end))
		binary.BigEndian.PutUint64(v[8:], uint64(now().UnixNano()))
		return b.Put([]byte(tag), v[:])
	})
	if err != nil {
		return boltWrap("raise", fmt.Errorf("tag %q: %w", tag, err))
	}
	return nil
}

// boltRaiseHint is boltRaise and the write of h in the same transaction: one fsync per load,
// as before hints existed. The mark is raised only when end is above it (never lowered).
func boltRaiseHint(g *boltGroup, tag string, end int64, h segment.Hint, now func() time.Time) error {
	if tag == "" || len(tag) > bolt.MaxKeySize {
		return fmt.Errorf("%w: %q", segment.ErrInvalidTag, tag)
	}
	err := g.update(context.Background(), func(tx *bolt.Tx) error {
		b := tx.Bucket(boltMarksBucket)
		cur, err := decodeBoltMark(b.Get([]byte(tag)))
		if err != nil {
			return err
		}
		if cur < end {
			var v [16]byte
			binary.BigEndian.PutUint64(v[:], uint64(end))
			binary.BigEndian.PutUint64(v[8:], uint64(now().UnixNano()))
			if err := b.Put([]byte(tag), v[:]); err != nil {
				return err
			}
		}
		hb, err := tx.CreateBucketIfNotExists(boltHintsBucket)
		if err != nil {
			return err
		}
		var v [24]byte
		binary.BigEndian.PutUint64(v[:], uint64(max(h.Step, 0)))
		binary.BigEndian.PutUint64(v[8:], uint64(max(h.Rate, 0)))
		binary.BigEndian.PutUint64(v[16:], uint64(max(h.Load, 0)))
		return hb.Put([]byte(tag), v[:])
	})
	if err != nil {
		return boltWrap("raise", fmt.Errorf("tag %q: %w", tag, err))
	}
	return nil
}

// boltHint reads the hint of tag: step(8) | rate(8) | load ns(8), big-endian. A missing or
// malformed hint is the zero Hint (a hint only sizes loads; a bad one must not stop them).
func boltHint(db *bolt.DB, tag string) (segment.Hint, error) {
	var h segment.Hint
	err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltHintsBucket)
		if b == nil {
			return nil
		}
		if v := b.Get([]byte(tag)); len(v) == 24 {
			h.Step = int64(binary.BigEndian.Uint64(v))
			h.Rate = int64(binary.BigEndian.Uint64(v[8:]))
			h.Load = time.Duration(binary.BigEndian.Uint64(v[16:]))
			if h.Step < 0 || h.Rate < 0 || h.Load < 0 {
				h = segment.Hint{}
			}
		}
		return nil
	})
	if err != nil {
		return segment.Hint{}, boltWrap("hint", err)
	}
	return h, nil
}

func decodeBoltMark(v []byte) (int64, error) {
	end, _, err := decodeBoltMarkTime(v)
	return end, err
}

// decodeBoltMarkTime decodes a mark: end(8) | raised at, unix ns(8), big-endian; marks
// written by earlier versions have no time (0).
func decodeBoltMarkTime(v []byte) (end, at int64, err error) {
	switch len(v) {
	case 0:
		if v == nil {
			return 0, 0, nil
		}
	case 8:
		return int64(binary.BigEndian.Uint64(v)), 0, nil
	case 16:
		return int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:])), nil
	}
	return 0, 0, fmt.Errorf("corrupt mark (%d bytes)", len(v))
}
