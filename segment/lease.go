package segment

import (
	"context"
	"errors"
	"fmt"
)

// Lessor is the one call a load makes to its store: lease the next range of a tag, creating the
// tag first when asked. *boltstore.BoltStore and *mysqlstore.MySQLStore implement it; for a Store
// without it (a test's fake, a minimal store) the generator leases through Allocate and Create
// (plainLessor), with the same outcome.
//
// Lessor stays apart from Store, found on the store by type assertion: besides the lease, it
// says that the store commits concurrent first loads together, and New sizes its first-load
// loaders on that (Config.FirstLoaders) before any lease, so an ErrNotSupported answer from
// the first Lease would come too late.
type Lessor interface {
	Lease(ctx context.Context, r LeaseRequest) (Lease, error)
}

// LeaseRequest is one load's request to the store.
type LeaseRequest struct {
	Tag  string
	Step int64 // the range's size; <= 0 means the tag's stored step
	// Floor is the tag's durable mark: a range that starts below it comes back without error
	// (uncommitted where the store can refuse it inside its transaction: MySQL rolls it
	// back, so a refused lease never moves max_id), for the generator's regression check to
	// refuse, count and log as for any other store. 0: no floor.
	Floor int64
	// Create, when set, is the row to create when the tag has none (AutoCreate's first
	// load); the creation and the first range share one commit where the store can (group
	// commit of concurrent first loads). Create.Name is Tag.
	Create *Tag
}

// Lease is a store's answer to a LeaseRequest: the row after the allocation (the range is
// [MaxID-size, MaxID), size the request's Step or, for <= 0, Alloc.Step) and whether this
// call created the row.
type Lease struct {
	Alloc
	Created bool
}

// lessorOf is the store's own Lease, or plainLessor around it.
func lessorOf(st Store) (l Lessor, own bool) {
	if l, ok := st.(Lessor); ok {
		return l, true
	}
	return plainLessor{st}, false
}

// plainLessor leases from a Store that has only Allocate and Create: the floor is left to the
// generator's regression check, and a creation is Allocate, Create on ErrUnknownTag, Allocate.
type plainLessor struct{ st Store }

func (p plainLessor) Lease(ctx context.Context, r LeaseRequest) (Lease, error) {
	a, err := p.st.Allocate(ctx, r.Tag, r.Step)
	if r.Create == nil || !errors.Is(err, ErrUnknownTag) {
		return Lease{Alloc: a}, err
	}
	cerr := p.st.Create(ctx, *r.Create)
	if cerr != nil && !errors.Is(cerr, ErrTagExists) {
		return Lease{}, fmt.Errorf("auto-create: %w", cerr)
	}
	a, err = p.st.Allocate(ctx, r.Tag, r.Step)
	return Lease{Alloc: a, Created: cerr == nil}, err
}

// MaxIDReader reads a tag's max_id (the start of the range the next Allocate would lease)
// without allocating: the state after a regression, a new tag's INCRBY count. ErrUnknownTag
// when no row. Without it (ErrNotSupported) a regressed tag retries its lease at once and
// any count is let through to the load.
type MaxIDReader interface {
	MaxID(ctx context.Context, tag string) (int64, error)
}

// TagChecker tells, without allocating, whether a tag could be leased: its row
// (ErrUnknownTag) and, for *mysqlstore.MySQLStore with the fence, its fence row
// (ErrNotAdopted); *boltstore.BoltStore reads the row. Without it (ErrNotSupported) CanLoad
// asks MaxID, and without that, Tags.
type TagChecker interface {
	CheckTag(ctx context.Context, tag string) error
}
