package boltstore

// The embedded store's side of the remainder file (segment/remainder.go): its identity and the
// durable record of consumed remainder files.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/leafd/leafd/segment"
)

var _ segment.RemainderStore = (*BoltStore)(nil)

// boltRemaindersBucket (in leafd.db): token of each consumed remainder file -> unix ns of its
// consumption. In the store file, not in marks.db or the data dir's other files: a restored
// copy of marks.db and the remainder file beside a live leafd.db finds its token consumed.
var boltRemaindersBucket = []byte("remainders")

// StoreID is the pairing id of leafd.db and marks.db (PairMarks), in hex: a remainder file
// is served only beside the store file it was taken from. Before the pairing there is none
// (an error: no remainder is bound).
func (s *BoltStore) StoreID(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	id, err := readPair(s.db)
	if err != nil {
		return "", err
	}
	if len(id) == 0 {
		return "", errors.New("segment: the store file is not paired with a marks file")
	}
	return "bolt:" + hex.EncodeToString(id), nil
}

// ConsumeRemainder records token in leafd.db in one fsynced transaction; ErrRemainderUsed
// when it is there already.
func (s *BoltStore) ConsumeRemainder(ctx context.Context, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(boltRemaindersBucket)
		if err != nil {
			return err
		}
		if b.Get([]byte(token)) != nil {
			return segment.ErrRemainderUsed
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(s.now().UnixNano()))
		return b.Put([]byte(token), v[:])
	})
	if errors.Is(err, segment.ErrRemainderUsed) {
		return err
	}
	if err != nil {
		return boltWrap("consume remainder", err)
	}
	return nil
}
