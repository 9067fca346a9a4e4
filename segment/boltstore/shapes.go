package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/storekit"
)

// The embedded store's shapes (segment.Shapes): the tag_shape bucket.

var (
	_ segment.Shapes = (*BoltStore)(nil)
	_ segment.Pruner = (*BoltStore)(nil)
)

var boltShapeBucket = []byte("tag_shape")

// CreateShape records tag's shape in the tag_shape bucket, in the transaction that checks
// leaf_alloc (bbolt has one writer: no race with Create).
func (s *BoltStore) CreateShape(ctx context.Context, tag string, spec []byte) error {
	if err := storekit.CheckShape(tag, spec); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		if tx.Bucket(boltAllocBucket).Get([]byte(tag)) != nil {
			return storekit.TagError(tag, segment.ErrTagExists, "a plain tag of this name exists")
		}
		if boltShaped(tx, tag) {
			return storekit.TagError(tag, segment.ErrTagExists, "tag already exists")
		}
		if boltHasRows(tx, tag) {
			return storekit.ErrRowsExist(tag)
		}
		// Refusals before the first write: the transaction is shared (group commit).
		b, err := tx.CreateBucketIfNotExists(boltShapeBucket)
		if err != nil {
			return err
		}
		return b.Put([]byte(tag), spec)
	})
	return boltWrapNil("create shape", err)
}

func boltShaped(tx *bolt.Tx, name string) bool {
	b := tx.Bucket(boltShapeBucket)
	return b != nil && b.Get([]byte(name)) != nil
}

// boltShapedName is Create's check of a name against the shapes (see shapedBase).
func boltShapedName(tx *bolt.Tx, t segment.Tag) error {
	if boltShaped(tx, t.Name) {
		return storekit.TagError(t.Name, segment.ErrShaped, "its counters are the rows "+t.Name+"@<period>")
	}
	if base, ok := storekit.ShapedBase(t); ok && boltShaped(tx, base) {
		return storekit.ErrRowNotShaped(t.Name, base)
	}
	return nil
}

// boltHasRows reports whether leaf_alloc has a row tag@....
func boltHasRows(tx *bolt.Tx, tag string) bool {
	prefix := []byte(tag + "@")
	k, _ := tx.Bucket(boltAllocBucket).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// LoadShape reads tag's shape.
func (s *BoltStore) LoadShape(ctx context.Context, tag string) ([]byte, error) {
	var spec []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltShapeBucket)
		var v []byte
		if b != nil {
			v = b.Get([]byte(tag))
		}
		if v == nil {
			return fmt.Errorf("%w %q", segment.ErrUnknownTag, tag)
		}
		spec = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return nil, boltWrap("load shape", err)
	}
	return spec, nil
}

// ShapeTags lists the shaped tags.
func (s *BoltStore) ShapeTags(ctx context.Context) ([]string, error) {
	var out []string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltShapeBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error { out = append(out, string(k)); return nil })
	})
	sort.Strings(out)
	return out, boltWrapNil("shape tags", err)
}

func boltWrapNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return boltWrap(op, err)
}

// DeleteTag deletes tag's row.
func (s *BoltStore) DeleteTag(ctx context.Context, tag string) error {
	return boltWrapNil("delete", s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(boltAllocBucket).Delete([]byte(tag))
	}))
}
