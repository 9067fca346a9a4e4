package segment

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxTagLen is the longest tag name accepted, in bytes (leaf_alloc.biz_tag is varchar(128)).
const MaxTagLen = 128

// ValidateTag reports whether name is a usable tag: 1 to MaxTagLen bytes of printable ASCII
// without space (0x21..0x7E). The error wraps ErrInvalidTag.
func ValidateTag(name string) error {
	if len(name) == 0 {
		return &TagError{Err: ErrInvalidTag, Detail: "empty tag name"}
	}
	if len(name) > MaxTagLen {
		return &TagError{Tag: strings.Clone(name[:16]) + "...", Err: ErrInvalidTag,
			Detail: fmt.Sprintf("tag name is %d bytes, at most %d allowed", len(name), MaxTagLen)}
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x21 || c > 0x7E {
			return &TagError{Tag: strings.Clone(name), Err: ErrInvalidTag,
				Detail: fmt.Sprintf("byte %d (counting from 1) is 0x%02x; only printable ASCII without space (0x21-0x7E) is allowed", i+1, c)}
		}
	}
	return nil
}

// TagError is an error about one tag. Err is one of the package's sentinels, so callers match
// it with errors.Is; Tag is a copy owned by the error (never the caller's buffer).
type TagError struct {
	Tag    string
	Err    error  // ErrUnknownTag, ErrInvalidTag, ErrUnavailable, ErrRegression, ErrLimit, ErrTagExists
	Detail string // human-readable cause, may be empty
	// Waited says, for ErrUnavailable, what the request waited for, in words fit for a
	// client (no store error text): a free loader (its load still queued), the store (its
	// load running there), or nothing (the loader queue is full, too many tags). Empty when
	// the cause is the store's last failed load, or unknown.
	Waited string
	// Cause is, for ErrUnavailable, the error of the tag's last failed load (nil when
	// none): its chain says what the store answered (internal/storeerr reads it). For
	// ErrUnknownTag from Info, the ErrUnavailable error of a first load that failed moments
	// ago, when there is one.
	Cause error
}

func (e *TagError) Error() string {
	s := e.Err.Error() + ": tag " + strconv.Quote(e.Tag)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel and, when there is one, the cause.
func (e *TagError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// tagError builds a TagError with a cloned tag, so the error may outlive the caller's buffer.
func tagError(tag string, err error, detail string) *TagError {
	return &TagError{Tag: strings.Clone(tag), Err: err, Detail: detail}
}
