package segment

import (
	"context"
	"errors"
	"sort"
	"strings"
)

// Shapes stores the ID shape of shaped tags (package shape: template, reset, zone, opaque), one
// opaque blob per tag, beside leaf_alloc so every instance renders a tag alike. A shaped tag has
// no leaf_alloc row of its own name: its counters are the rows tag@period, and a plain row of the
// shaped name is never created (Create refuses it with ErrShaped), so an instance that does not
// know the shape yet cannot serve raw counters under that name. Implementations:
// *mysqlstore.MySQLStore (table leafd_tag_shape), *boltstore.BoltStore (bucket tag_shape). A
// Store without shapes returns ErrNotSupported: no tag of it is a shaped tag's counter row.
type Shapes interface {
	// CreateShape records spec for tag; ErrTagExists when tag has a shape or a leaf_alloc row.
	CreateShape(ctx context.Context, tag string, spec []byte) error
	// LoadShape returns tag's spec; ErrUnknownTag when it has none.
	LoadShape(ctx context.Context, tag string) ([]byte, error)
	// ShapeTags lists the shaped tags, sorted.
	ShapeTags(ctx context.Context) ([]string, error)
}

// ErrShaped: Create was given the name of a shaped tag (its counters live in rows tag@period).
var ErrShaped = errors.New("segment: the tag has an ID shape")

// MaxShapeLen bounds a stored spec, in bytes.
const MaxShapeLen = 1024

// PeriodRows lists the counter rows of shaped tag (tag@period), sorted (periods sort by time).
func PeriodRows(ctx context.Context, st Store, tag string) ([]string, error) {
	all, err := st.Tags(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range all {
		if strings.HasPrefix(t, tag+"@") {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Pruner deletes leaf_alloc rows (the old periods of periodic tags). A deleted row's IDs are
// never issued again: a re-created row starts above this instance's mark and, on MySQL with
// the failover fence, above leafd_fence's high-water (which the deletion keeps).
type Pruner interface {
	DeleteTag(ctx context.Context, tag string) error
}
