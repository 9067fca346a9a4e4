package boltstore

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/leafd/leafd/segment"
)

// RaiseMaxID moves tag's max_id up to floor when it is below, never down, in one durable
// transaction, and returns max_id before and after. It is the embedded store's counterpart of
// the operator's UPDATE after restoring a MySQL backup (leafd raise-max-id --data-dir): after
// a restored leafd.db, raising each tag to its mark in marks.db lets the tag serve again above
// every ID issued before. ErrUnknownTag when the tag has no row.
func (s *BoltStore) RaiseMaxID(ctx context.Context, tag string, floor int64) (before, after int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if floor < 0 || floor >= segment.MaxRangeEnd {
		return 0, 0, fmt.Errorf("%w: max_id %d out of range", segment.ErrLimit, floor)
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
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
		before, after = r.maxID, r.maxID
		if r.maxID >= floor {
			return nil
		}
		r.maxID, after = floor, floor
		r.updated = s.now()
		return b.Put(key, r.encode())
	})
	if err != nil {
		return 0, 0, boltWrap("raise max_id", err)
	}
	return before, after, nil
}
