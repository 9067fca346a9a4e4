// Package storekit holds what both stores (segment/boltstore, segment/mysqlstore) check alike,
// so that a row or a shape accepted by one is accepted by the other.
package storekit

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/leafd/leafd/segment"
)

// Limits shared by both stores so that a row accepted by one is accepted by the other; they
// follow Leaf's DDL (step int(11), description varchar(256); biz_tag varchar(128) is
// MaxTagLen).
const (
	MaxDescLen = 256 // characters
	MaxStep    = math.MaxInt32
)

// TagError builds a segment.TagError with a cloned tag, so the error may outlive the caller's
// buffer.
func TagError(tag string, err error, detail string) *segment.TagError {
	return &segment.TagError{Tag: strings.Clone(tag), Err: err, Detail: detail}
}

// CheckTag validates a row for Create with the same rules in every store and fills the
// defaults (MaxID 0 means 1).
func CheckTag(t segment.Tag) (segment.Tag, error) {
	if err := segment.ValidateTag(t.Name); err != nil {
		return t, err
	}
	if t.MaxID == 0 {
		t.MaxID = 1
	}
	if t.MaxID < 1 {
		return t, fmt.Errorf("%w: tag %q: first id %d must be >= 1", segment.ErrLimit, t.Name, t.MaxID)
	}
	if t.Step < 1 || t.Step > MaxStep {
		return t, fmt.Errorf("%w: tag %q: step %d must be 1..%d", segment.ErrLimit, t.Name, t.Step, MaxStep)
	}
	if t.MaxID > math.MaxInt64-t.Step {
		return t, fmt.Errorf("%w: tag %q: first id %d + step %d overflows int64", segment.ErrLimit, t.Name, t.MaxID, t.Step)
	}
	if utf8.RuneCountInString(t.Description) > MaxDescLen {
		return t, fmt.Errorf("%w: tag %q: description longer than %d characters", segment.ErrLimit, t.Name, MaxDescLen)
	}
	return t, nil
}

// CheckShape validates a shape for CreateShape.
func CheckShape(tag string, spec []byte) error {
	if err := segment.ValidateTag(tag); err != nil {
		return err
	}
	if len(spec) == 0 || len(spec) > segment.MaxShapeLen {
		return TagError(tag, segment.ErrLimit, fmt.Sprintf("shape of %d bytes, 1 to %d allowed", len(spec), segment.MaxShapeLen))
	}
	return nil
}

// ShapedBase returns the prefix before the first '@' of a name that a plain creation (not a
// shaped tag's own row) must not take when that prefix is a shaped tag: a plain row tag@x
// would be served as the shaped tag's counter of period x, from a START it did not choose.
func ShapedBase(t segment.Tag) (string, bool) {
	i := strings.IndexByte(t.Name, '@')
	if i <= 0 || t.Row != nil {
		return "", false
	}
	return t.Name[:i], true
}

// ErrRowNotShaped: a plain creation of a row of shaped tag base.
func ErrRowNotShaped(name, base string) error {
	return TagError(name, segment.ErrShaped, "'"+base+"' is a shaped tag and its counter rows are created only through it (IDS.NEXT "+base+")")
}

// ErrRowsExist: CreateShape of a name that has rows tag@... it did not create.
func ErrRowsExist(tag string) error {
	return TagError(tag, segment.ErrTagExists, "rows '"+tag+"@...' exist: a shaped tag would take them over as its counters; choose another name")
}
