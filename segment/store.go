package segment

import (
	"context"
	"errors"
	"time"
)

// Tag is a row of Leaf's leaf_alloc table.
type Tag struct {
	Name        string
	MaxID       int64 // for Create: the first ID that will be issued (Leaf's initial max_id, default 1)
	Step        int64 // stored step: first segment size and the minimum of the dynamic step
	Description string
	UpdateTime  time.Time // read side only
	// Ordered (for Create): the tag is ORDERED, recorded in the creating transaction
	// (MySQL: its leafd_leader row; embedded: the "ordered" bucket). See package ordered.
	Ordered bool
	// Row (for Create): the tag is a counter row tag@period of the shaped tag before its '@',
	// created by that tag's shaped path (see Shapes). Any other creation of a name whose
	// prefix is a shaped tag is ErrShaped.
	Row *ShapeRow
}

// ShapeRow describes a shaped tag's counter row to Create.
type ShapeRow struct {
	// PeriodStart is the first instant of the row's period (zero: a tag without reset, whose
	// one row may be created at any time).
	PeriodStart time.Time
}

// Alloc is the row after one allocation. The leased range is [MaxID-step, MaxID) where step is
// the step that was passed to Allocate (or Tag.Step when 0 was passed).
type Alloc struct {
	MaxID int64
	Step  int64 // the tag's stored step (leaf_alloc.step)
}

// Store leases ranges and reads them back. Implementations: *boltstore.BoltStore (embedded),
// *mysqlstore.MySQLStore.
//
// Allocate, Tags and Create are what every Store must do. A Store that cannot do one of the
// others (a test's fake, a minimal store) returns ErrNotSupported from it, and the generator
// goes without, as said at each method.
type Store interface {
	// Allocate runs UPDATE max_id = max_id + step and its SELECT in one transaction, durably
	// committed before it returns. step <= 0 means the stored step. ErrUnknownTag when no row.
	Allocate(ctx context.Context, tag string, step int64) (Alloc, error)
	// Tags lists the tag names in the store.
	Tags(ctx context.Context) ([]string, error)
	// Create inserts a row; ErrTagExists when the tag exists.
	Create(ctx context.Context, t Tag) error
	// MaxID and CheckTag read a tag without allocating (see MaxIDReader, TagChecker).
	MaxIDReader
	TagChecker
	// The ID shapes of shaped tags (see Shapes).
	Shapes
}

// Marks records, durably, the highest range end ever granted per tag (the regression guard),
// with the tag's Hint beside it, and lists what it holds. Implementations: *boltstore.BoltStore
// (same file as the embedded store) and *boltstore.MarkFile (marks only, for MySQL). Raise and
// RaiseHint must be durable when they return; they never lower a mark.
//
// Mark and Raise are the guard and every Marks has them. The others serve the remembered step,
// IDS.MARKS and the warm start; a Marks that cannot keep hints or list (a test's fake, a marks
// source that has nothing to remember) returns ErrNotSupported from them, and the generator
// then goes without: it raises through Raise, starts from the stored step, answers IDS.MARKS
// with an error and warms nothing.
type Marks interface {
	Mark(tag string) (int64, error) // 0 when none
	Raise(tag string, end int64) error
	// RaiseHint raises the mark exactly as Raise does and records h in the same durable commit.
	RaiseHint(tag string, end int64, h Hint) error
	// Hint returns the tag's Hint, the zero Hint when none is recorded.
	Hint(tag string) (Hint, error)
	// AllMarks lists every mark, read from the file: the tags this instance ever leased, held
	// now or not.
	AllMarks() ([]Mark, error)
	// MarksAfter lists up to n marks whose tag sorts after the given one ("" : from the
	// first), by tag name: one page of AllMarks, read without the others.
	MarksAfter(after string, n int) ([]Mark, error)
	// RecentTags lists up to n tags, most recently raised first: the tags this instance served
	// before a restart.
	RecentTags(n int) ([]string, error)
}

// ErrNotSupported: the Marks (or store) cannot do what was asked; the generator goes without
// the feature (see Marks).
var ErrNotSupported = errors.New("segment: not supported")

// Hint is what a tag's latest load leaves for the tag's next life in this instance (after a
// restart): the size of the segment it leased (the dynamic step), the demand observed when it
// started (IDs per second, 0 when unknown) and how long it took. The first load after a
// restart leases the remembered step and sizes itself from the remembered demand, instead of
// starting again from the stored step. A hint only ever sizes the range leased from the store
// (one atomic max_id += step): it has no part in uniqueness.
type Hint struct {
	Step int64
	Rate int64         // IDs per second
	Load time.Duration // duration of the load (Marks read, lease [, create], mark raise excluded)
}

// Mark is one durable mark: End is the highest range end ever granted for Tag.
type Mark struct {
	Tag string
	End int64
}

// Errors returned by this package, wrapped with %w; match them with errors.Is.
var (
	// ErrUnknownTag: the tag has no row in the store.
	ErrUnknownTag = errors.New("segment: unknown tag")
	// ErrTagExists: Create was given a tag that already has a row.
	ErrTagExists = errors.New("segment: tag exists")
	// ErrInvalidTag: the tag name is empty, too long or not printable ASCII.
	ErrInvalidTag = errors.New("segment: invalid tag")
	// ErrUnavailable: no leased range is ready and none became ready within the wait bound
	// (store down or slow).
	ErrUnavailable = errors.New("segment: unavailable")
	// ErrRegression: the store handed out a range below the durable mark of ranges already
	// granted (a restored backup, a hand-edited max_id); the range is not used.
	ErrRegression = errors.New("segment: range regression")
	// ErrLimit: a count or size limit was exceeded (NextN/AppendIDs count, number of tags).
	ErrLimit = errors.New("segment: limit exceeded")
	// ErrNotAdopted: the tag has a leaf_alloc row but no leafd_fence row (written by Leaf or
	// by hand, or its adoption was lost in a failover); the failover fence cannot tell a
	// safe start for it, so it is refused until `leafd adopt` records its fence row
	// (docs/MYSQL.md, "Adopting a Leaf table").
	ErrNotAdopted = errors.New("segment: tag not adopted")
	// ErrNotAdmitted: Config.Admit refused the tag's first range here (an ORDERED tag led
	// by another instance); the error wraps Admit's.
	ErrNotAdmitted = errors.New("segment: tag not served by this instance")
)
