package boltstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/storekit"
)

// Compile-time checks that the embedded stores satisfy the interfaces the core consumes.
var (
	_ segment.Store = (*BoltStore)(nil)
	_ segment.Marks = (*BoltStore)(nil)
	_ segment.Marks = (*MarkFile)(nil)

	_ segment.Lessor = (*BoltStore)(nil)
)

// Bucket names inside the bbolt file. leaf_alloc mirrors Leaf's table; marks holds the
// regression guard (tag -> highest range end ever granted).
var (
	boltAllocBucket = []byte("leaf_alloc")
	boltMarksBucket = []byte("marks")
	// hints: tag -> the Hint of its latest load (step, demand, load time); created on first
	// use, so files written by earlier versions open unchanged.
	boltHintsBucket = []byte("hints")
	// boltOrderedBucket holds the names of the ORDERED tags (created on the first one).
	boltOrderedBucket = []byte("ordered")
)

// defaultBoltLockTimeout bounds the wait for bbolt's flock: long enough to ride out a
// previous process that is still exiting, short enough that a second leafd on the same data
// dir fails at once with a clear message instead of hanging.
const defaultBoltLockTimeout = time.Second

// BoltOptions configures OpenBolt and OpenMarkFile. The zero value selects the defaults.
type BoltOptions struct {
	// LockTimeout is how long to wait for the file lock held by another process before giving
	// up with an "in use by another leafd process" error. Zero means 1s; negative is invalid.
	LockTimeout time.Duration
	// Now supplies update_time for written rows. Nil means time.Now.
	Now func() time.Time
}

func (o BoltOptions) withDefaults() (BoltOptions, error) {
	if o.LockTimeout < 0 {
		return o, fmt.Errorf("segment: bolt lock timeout %v is negative", o.LockTimeout)
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = defaultBoltLockTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// BoltStore is the embedded store: Leaf's leaf_alloc table and the regression-guard marks in
// one bbolt file. Every Allocate, Create and Raise is one read-write transaction that bbolt
// fsyncs on commit, so a range is durable before the caller sees it, across kill -9.
//
// The file is locked (flock) for the life of the store, so two processes never share it.
// BoltStore is safe for concurrent use.
type BoltStore struct {
	db    *bolt.DB
	group *boltGroup // every write: concurrent calls share a transaction (groupcommit.go)
	now   func() time.Time
}

// OpenBolt opens (creating if needed) the store file at path, typically
// <data-dir>/leafd.db, creating the parent directory when missing. When another process
// holds the file it fails after opts.LockTimeout with an error saying the data dir is in use.
func OpenBolt(path string, opts BoltOptions) (*BoltStore, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	db, err := openBoltFile(path, opts, boltAllocBucket, boltMarksBucket)
	if err != nil {
		return nil, err
	}
	return &BoltStore{db: db, group: newBoltGroup(db), now: opts.Now}, nil
}

// openBoltFile opens the bbolt file with a bounded lock wait and makes sure the buckets exist.
// NoSync is never set: durability on commit is the point of this store.
func openBoltFile(path string, opts BoltOptions, buckets ...[]byte) (*bolt.DB, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("segment: create data dir: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("data dir %s is in use by another leafd process (bolt file locked): %s", dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("segment: init %s: %w", path, err)
	}
	return db, nil
}

// Allocate adds step (the stored step when step <= 0) to the tag's max_id and returns the new
// row, committed and fsynced. The leased range is [MaxID-step, MaxID).
func (s *BoltStore) Allocate(ctx context.Context, tag string, step int64) (segment.Alloc, error) {
	if err := ctx.Err(); err != nil {
		return segment.Alloc{}, err
	}
	var a segment.Alloc
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltAllocBucket)
		key := []byte(tag)
		v := b.Get(key)
		if v == nil {
			return fmt.Errorf("%w %q", segment.ErrUnknownTag, tag)
		}
		r, err := decodeBoltRow(v)
		if err != nil {
			return fmt.Errorf("segment: tag %q: %w", tag, err)
		}
		inc := step
		if inc <= 0 {
			inc = r.step
		}
		if inc <= 0 {
			return fmt.Errorf("segment: tag %q has invalid stored step %d", tag, r.step)
		}
		if r.maxID > math.MaxInt64-inc {
			return fmt.Errorf("%w: tag %q: max_id %d + step %d overflows int64", segment.ErrLimit, tag, r.maxID, inc)
		}
		r.maxID += inc
		r.updated = s.now()
		if err := b.Put(key, r.encode()); err != nil {
			return err
		}
		a = segment.Alloc{MaxID: r.maxID, Step: r.step}
		return nil
	})
	if err != nil {
		return segment.Alloc{}, boltWrap("allocate", err)
	}
	return a, nil
}

// update runs fn in a read-write transaction shared with the concurrent callers (group
// commit: fn must keep boltGroup's contract, an error only before it writes) and returns when
// it is committed or ctx is done, whichever comes first. bbolt cannot cancel a transaction;
// one abandoned on ctx still commits or fails by itself (an Allocate then leases a range
// nobody uses: a gap).
func (s *BoltStore) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	return s.group.update(ctx, fn)
}

// view runs fn in a read-only transaction and returns when it ends or ctx is done, whichever
// comes first (a read waits only while bbolt remaps the file).
func (s *BoltStore) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	done := make(chan error, 1)
	go func() { done <- s.db.View(fn) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MaxID returns the tag's max_id, the start of the range the next Allocate would lease,
// without allocating (the generator asks it after a regression). ErrUnknownTag when no row.
func (s *BoltStore) MaxID(ctx context.Context, tag string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var maxID int64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(boltAllocBucket).Get([]byte(tag))
		if v == nil {
			return fmt.Errorf("%w %q", segment.ErrUnknownTag, tag)
		}
		r, err := decodeBoltRow(v)
		if err != nil {
			return fmt.Errorf("segment: tag %q: %w", tag, err)
		}
		maxID = r.maxID
		return nil
	})
	if err != nil {
		return 0, boltWrap("max_id", err)
	}
	return maxID, nil
}

// CheckTag reports, without allocating, whether an allocation of tag would find its row
// (ErrUnknownTag): the embedded store has no fence, the row is all a lease needs.
func (s *BoltStore) CheckTag(ctx context.Context, tag string) error {
	_, err := s.MaxID(ctx, tag)
	return err
}

// Tags lists the tag names, sorted.
func (s *BoltStore) Tags(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var tags []string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(boltAllocBucket).ForEach(func(k, _ []byte) error {
			tags = append(tags, string(k))
			return nil
		})
	})
	if err != nil {
		return nil, boltWrap("tags", err)
	}
	return tags, nil
}

// Rows returns every row, sorted by tag (for status pages, like Leaf's /db page).
func (s *BoltStore) Rows(ctx context.Context) ([]segment.Tag, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rows []segment.Tag
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(boltAllocBucket).ForEach(func(k, v []byte) error {
			r, err := decodeBoltRow(v)
			if err != nil {
				return fmt.Errorf("tag %q: %w", k, err)
			}
			rows = append(rows, segment.Tag{Name: string(k), MaxID: r.maxID, Step: r.step, Description: r.desc, UpdateTime: r.updated})
			return nil
		})
	})
	if err != nil {
		return nil, boltWrap("rows", err)
	}
	return rows, nil
}

// Create inserts a row for t (MaxID 0 means 1, Leaf's default); ErrTagExists when the tag
// has a row, ErrInvalidTag for a bad name, ErrLimit for out-of-range numbers.
func (s *BoltStore) Create(ctx context.Context, t segment.Tag) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := storekit.CheckTag(t)
	if err != nil {
		return err
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltAllocBucket)
		key := []byte(t.Name)
		if b.Get(key) != nil {
			return fmt.Errorf("%w: %q", segment.ErrTagExists, t.Name)
		}
		if err := boltShapedName(tx, t); err != nil {
			return err
		}
		r := boltRow{maxID: t.MaxID, step: t.Step, updated: s.now(), desc: t.Description}
		if t.Ordered {
			ob, err := tx.CreateBucketIfNotExists(boltOrderedBucket)
			if err != nil {
				return err
			}
			if err := ob.Put(key, []byte{1}); err != nil {
				return err
			}
		}
		return b.Put(key, r.encode())
	})
	if err != nil {
		return boltWrap("create", err)
	}
	return nil
}

// CreateAllocate leases the next range of tag like Allocate and, when the tag has no row,
// first creates it from t (auto-create) in the same transaction: a new tag's creation and
// its first range cost one shared commit (group commit) instead of a failed allocation, a
// commit and another commit. created reports whether this call created the row. The checks
// are Create's (a shaped name is ErrShaped) and Allocate's.
func (s *BoltStore) CreateAllocate(ctx context.Context, t segment.Tag, step, floor int64) (a segment.Alloc, created bool, err error) {
	if err := ctx.Err(); err != nil {
		return segment.Alloc{}, false, err
	}
	t, err = storekit.CheckTag(t)
	if err != nil {
		return segment.Alloc{}, false, err
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
		a, created = segment.Alloc{}, false // the operation runs once, but keep it self-contained
		b := tx.Bucket(boltAllocBucket)
		key := []byte(t.Name)
		var r boltRow
		if v := b.Get(key); v != nil {
			var err error
			if r, err = decodeBoltRow(v); err != nil {
				return fmt.Errorf("segment: tag %q: %w", t.Name, err)
			}
		} else {
			if err := boltShapedName(tx, t); err != nil {
				return err
			}
			r = boltRow{maxID: t.MaxID, step: t.Step, desc: t.Description}
			created = true
		}
		inc := step
		if inc <= 0 {
			inc = r.step
		}
		if inc <= 0 {
			return fmt.Errorf("segment: tag %q has invalid stored step %d", t.Name, r.step)
		}
		if r.maxID > math.MaxInt64-inc {
			return fmt.Errorf("%w: tag %q: max_id %d + step %d overflows int64", segment.ErrLimit, t.Name, r.maxID, inc)
		}
		r.maxID += inc
		r.updated = s.now()
		if err := b.Put(key, r.encode()); err != nil {
			return err
		}
		a = segment.Alloc{MaxID: r.maxID, Step: r.step}
		return nil
	})
	if err != nil {
		return segment.Alloc{}, false, boltWrap("create and allocate", err)
	}
	return a, created, nil
}

// Mark returns the highest range end recorded for tag, 0 when none. (leafd keeps its marks
// in a MarkFile apart from this file, so that a restored copy of it is caught; these are for
// tests and for MigrateMarks.)
func (s *BoltStore) Mark(tag string) (int64, error) { return boltMark(s.db, tag) }

// Raise durably records end as the tag's mark unless the mark is already at or above it.
func (s *BoltStore) Raise(tag string, end int64) error { return boltRaise(s.group, tag, end, s.now) }

// RaiseHint raises the mark like Raise and records h, in one durable commit.
func (s *BoltStore) RaiseHint(tag string, end int64, h segment.Hint) error {
	return boltRaiseHint(s.group, tag, end, h, s.now)
}

// Hint returns the recorded Hint of tag, the zero Hint when none.
func (s *BoltStore) Hint(tag string) (segment.Hint, error) { return boltHint(s.db, tag) }

// RecentTags lists up to n tags with a mark, most recently raised first.
func (s *BoltStore) RecentTags(n int) ([]string, error) { return boltRecent(s.db, n) }

// AllMarks lists every mark of the file, by tag name.
func (s *BoltStore) AllMarks() ([]segment.Mark, error) { return boltAll(s.db) }

// MarksAfter lists up to n marks whose tag sorts after the given one, by tag name.
func (s *BoltStore) MarksAfter(after string, n int) ([]segment.Mark, error) {
	return boltAfter(s.db, after, n)
}

// Close releases the file and its lock. It is idempotent.
func (s *BoltStore) Close() error {
	err := s.db.Close()
	s.group.wait()
	return err
}

// boltWrap prefixes infrastructure errors; domain sentinels pass through unchanged so their
// text stays short for the handlers.
func boltWrap(op string, err error) error {
	for _, s := range []error{segment.ErrUnknownTag, segment.ErrTagExists, segment.ErrInvalidTag, segment.ErrLimit, segment.ErrShaped} {
		if errors.Is(err, s) {
			return err
		}
	}
	return fmt.Errorf("segment: bolt %s: %w", op, err)
}

// boltRow is the encoded value of a leaf_alloc entry:
//
//	version(1) | max_id(8) | step(8) | update_time unix ns(8) | description(rest)
//
// integers big-endian. The version byte lets a later format coexist with this one.
type boltRow struct {
	maxID   int64
	step    int64
	updated time.Time
	desc    string
}

const (
	boltRowV1     = 1
	boltRowHeader = 1 + 8 + 8 + 8
)

func (r boltRow) encode() []byte {
	b := make([]byte, boltRowHeader, boltRowHeader+len(r.desc))
	b[0] = boltRowV1
	binary.BigEndian.PutUint64(b[1:], uint64(r.maxID))
	binary.BigEndian.PutUint64(b[9:], uint64(r.step))
	binary.BigEndian.PutUint64(b[17:], uint64(r.updated.UnixNano()))
	return append(b, r.desc...)
}

func decodeBoltRow(v []byte) (boltRow, error) {
	if len(v) < boltRowHeader || v[0] != boltRowV1 {
		return boltRow{}, fmt.Errorf("corrupt leaf_alloc row (%d bytes)", len(v))
	}
	return boltRow{
		maxID:   int64(binary.BigEndian.Uint64(v[1:])),
		step:    int64(binary.BigEndian.Uint64(v[9:])),
		updated: time.Unix(0, int64(binary.BigEndian.Uint64(v[17:]))),
		desc:    string(v[boltRowHeader:]),
	}, nil
}

// Lease implements segment.Lessor: CreateAllocate when the request creates, else Allocate. A
// range below the floor is committed and comes back for the generator's regression check to
// refuse.
func (s *BoltStore) Lease(ctx context.Context, r segment.LeaseRequest) (segment.Lease, error) {
	if r.Create != nil {
		a, created, err := s.CreateAllocate(ctx, *r.Create, r.Step, r.Floor)
		return segment.Lease{Alloc: a, Created: created}, err
	}
	a, err := s.Allocate(ctx, r.Tag, r.Step)
	return segment.Lease{Alloc: a}, err
}
