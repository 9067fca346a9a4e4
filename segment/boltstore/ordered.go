package boltstore

import (
	"context"

	bolt "go.etcd.io/bbolt"
)

// IsOrdered reports whether tag was created ORDERED (the embedded store's "ordered" bucket).
// The embedded store is single-instance (its data dir is locked), so an ordered tag is served
// by this instance alone and needs no lease: its IDs are strictly increasing already.
func (s *BoltStore) IsOrdered(ctx context.Context, tag string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var ok bool
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if b := tx.Bucket(boltOrderedBucket); b != nil {
			ok = b.Get([]byte(tag)) != nil
		}
		return nil
	})
	return ok, boltWrapNil("ordered", err)
}

// List returns the ORDERED tags, sorted.
func (s *BoltStore) List(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var tags []string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltOrderedBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			tags = append(tags, string(k))
			return nil
		})
	})
	return tags, boltWrapNil("ordered tags", err)
}
