package boltstore

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/leafd/leafd/segment"
)

// The region record of the embedded store: its "region" bucket (see segment.RegionStore).

var (
	boltRegionBucket = []byte("region")
	boltRegionKey    = []byte("layout")
)

// Region implements RegionStore.
func (s *BoltStore) Region(ctx context.Context) (segment.Region, bool, error) {
	var (
		r  segment.Region
		ok bool
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltRegionBucket)
		if b == nil {
			return nil
		}
		v := b.Get(boltRegionKey)
		if v == nil {
			return nil
		}
		var err error
		r, err = segment.ParseRegion(string(v))
		ok = err == nil
		return err
	})
	if err != nil {
		return segment.Region{}, false, boltWrap("region", err)
	}
	return r, ok, nil
}

// InitRegion implements RegionStore.
func (s *BoltStore) InitRegion(ctx context.Context, r segment.Region) (segment.Region, error) {
	r = segment.Region.Normal(r)
	had := r
	err := s.update(ctx, func(tx *bolt.Tx) error {
		if b := tx.Bucket(boltRegionBucket); b != nil {
			if v := b.Get(boltRegionKey); v != nil {
				var err error
				had, err = segment.ParseRegion(string(v))
				return err
			}
		}
		b, err := tx.CreateBucketIfNotExists(boltRegionBucket)
		if err != nil {
			return err
		}
		return b.Put(boltRegionKey, []byte(r.String()))
	})
	if err != nil {
		return segment.Region{}, boltWrap("record region", err)
	}
	return had, nil
}

// SetRegion implements RegionStore.
func (s *BoltStore) SetRegion(ctx context.Context, r segment.Region) error {
	r = segment.Region.Normal(r)
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(boltRegionBucket)
		if err != nil {
			return err
		}
		return b.Put(boltRegionKey, []byte(r.String()))
	})
	if err != nil {
		return boltWrap("record region", err)
	}
	return nil
}

var _ segment.RegionStore = (*BoltStore)(nil)
