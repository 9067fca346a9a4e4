package boltstore

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The pairing of the embedded store's two files. The marks live in marks.db, apart from
// leafd.db, so that a restored copy of leafd.db is caught as a regression; that holds only
// while marks.db is there. A random pairing id is written into both files when they are
// first seen together; at open, a leafd.db that holds tags beside a marks.db that is missing,
// new or of another pair is refused (ErrUnpairedMarks) instead of served without its marks.
//
// What cannot be detected here: both files restored from the same snapshot (they are paired
// with each other, and both are behind). docs/SEGMENT.md says what to do then.

var (
	boltMetaBucket = []byte("leafd_meta")
	boltPairKey    = []byte("pair")
)

// ErrUnpairedMarks: the embedded store file holds tags but the marks file beside it is
// missing, new, or belongs to another store file.
var ErrUnpairedMarks = errors.New("segment: regression marks file missing or not paired with the store file")

// PairMarks checks that m is the marks file of s, pairing them when first seen together.
// marksExisted tells whether the marks file existed before it was opened. Unpaired files are
// paired without question when s holds no tag, or when m existed (a data dir of a version
// before pairing), or when s still holds the marks of a version before marks.db (the upgrade
// MigrateMarks performs). Otherwise it returns ErrUnpairedMarks unless force is set, in which
// case it pairs them anew. It reports what it did, for the log.
func PairMarks(s *BoltStore, m *MarkFile, marksExisted, force bool) (string, error) {
	ps, err := readPair(s.db)
	if err != nil {
		return "", err
	}
	pm, err := readPair(m.db)
	if err != nil {
		return "", err
	}
	switch {
	case ps != nil && bytes.Equal(ps, pm):
		return "", nil // paired
	case ps == nil && pm != nil:
		// leafd.db from before the pairing (restored, or replaced) beside a paired marks.db:
		// the marks are there and catch any regression.
		return "store file paired with the existing marks file", writePair(s.db, pm)
	}
	var tags, legacy bool
	err = s.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(boltAllocBucket).Cursor().First()
		tags = k != nil
		k, _ = tx.Bucket(boltMarksBucket).Cursor().First()
		legacy = k != nil
		return nil
	})
	if err != nil {
		return "", boltWrap("pair", err)
	}
	var why string
	switch {
	case !tags:
		why = "" // nothing issued from this store file
	case ps == nil && marksExisted:
		why = "" // both files of a version before the pairing
	case ps == nil && legacy:
		why = "" // the marks were inside leafd.db (before marks.db); MigrateMarks copied them
	case pm == nil && !marksExisted:
		why = "the marks file is missing (deleted, or the data dir was rebuilt from a copy of leafd.db alone)"
	case pm == nil:
		why = "the marks file is new or was replaced (it carries no pairing id)"
	default:
		why = fmt.Sprintf("the marks file belongs to another store file (pairing id %s, the store file's is %s)",
			hex.EncodeToString(pm), hex.EncodeToString(ps))
	}
	if why != "" && !force {
		return "", fmt.Errorf("%w: the store file holds tags, but %s", ErrUnpairedMarks, why)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	// marks.db first: a crash in between leaves the case "store file unpaired, marks file
	// paired", which pairs on the next open.
	if err := writePair(m.db, id); err != nil {
		return "", err
	}
	if err := writePair(s.db, id); err != nil {
		return "", err
	}
	if why != "" {
		return "paired anew on request although " + why, nil
	}
	return "store and marks files paired", nil
}

func readPair(db *bolt.DB) ([]byte, error) {
	var id []byte
	err := db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(boltMetaBucket); b != nil {
			id = bytes.Clone(b.Get(boltPairKey))
		}
		return nil
	})
	if err != nil {
		return nil, boltWrap("read pairing id", err)
	}
	return id, nil
}

func writePair(db *bolt.DB, id []byte) error {
	err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(boltMetaBucket)
		if err != nil {
			return err
		}
		return b.Put(boltPairKey, id)
	})
	if err != nil {
		return boltWrap("write pairing id", err)
	}
	return nil
}
