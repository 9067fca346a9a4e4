package segment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Region is this deployment's share of the ID space when n independent deployments (regions),
// each on its own database, issue IDs of the same tags: region K of N. The store's counter is
// the region's own; a counter value x stands for the ID x*N + K, so the IDs of two regions
// never meet (they differ modulo N), and the IDs of one region increase with its counter. The
// zero Region and {0, 1} are the single region: IDs are the counter itself.
type Region struct {
	K, N int64
}

// MaxRegions bounds N: the worker-id space (1024 ids by default) is split N ways too.
const MaxRegions = 256

// ErrRegionMismatch (wrapped): the store records another region layout than this start's
// (another region's database, or a layout changed without the documented procedure).
var ErrRegionMismatch = errors.New("segment: region layout mismatch")

// ParseRegion reads "k/n" (0 <= k < n <= MaxRegions); "" is the single region.
func ParseRegion(s string) (Region, error) {
	if s == "" {
		return Region{0, 1}, nil
	}
	ks, ns, ok := strings.Cut(s, "/")
	k, kerr := strconv.ParseInt(ks, 10, 64)
	n, nerr := strconv.ParseInt(ns, 10, 64)
	if !ok || kerr != nil || nerr != nil {
		return Region{}, fmt.Errorf("region %q: want k/n, e.g. 0/2", s)
	}
	r := Region{k, n}
	if n < 1 {
		return Region{}, fmt.Errorf("region %q: want 0 <= k < n <= %d", s, MaxRegions)
	}
	return r, r.Validate()
}

// Validate checks 0 <= K < N <= MaxRegions (the zero Region is the single region).
func (r Region) Validate() error {
	if r == (Region{}) {
		return nil
	}
	if r.N < 1 || r.N > MaxRegions || r.K < 0 || r.K >= r.N {
		return fmt.Errorf("region %d/%d: want 0 <= k < n <= %d", r.K, r.N, MaxRegions)
	}
	return nil
}

// Single reports whether r is the single region (IDs are the counter).
func (r Region) Single() bool { return r.N <= 1 }

func (r Region) String() string {
	if r.Single() {
		return "0/1"
	}
	return fmt.Sprintf("%d/%d", r.K, r.N)
}

// ID is the ID of counter value x (x >= 0; the caller bounds x by MaxCounter).
func (r Region) ID(x int64) int64 {
	if r.Single() {
		return x
	}
	return x*r.N + r.K
}

// Counter is the smallest counter value whose ID is >= id: the counter a row must start at
// so that its first ID is at least id (IDS.CREATE START, adoption floors).
func (r Region) Counter(id int64) int64 {
	if r.Single() {
		return id
	}
	if id <= r.K {
		return 0
	}
	return (id - r.K + r.N - 1) / r.N
}

// MaxCounter is the largest counter value whose ID fits an int64.
func (r Region) MaxCounter() int64 {
	if r.Single() {
		return math.MaxInt64
	}
	return (math.MaxInt64 - r.K) / r.N
}

// Regional serves a Generator's tags in region R: every ID the generator takes from its
// counter ranges leaves as R.ID(x), on every path that hands IDs out (INCR, IDS.SEGMENT, the
// Leaf HTTP API, shaped and ordered tags, all of which call Next or AppendIDs); the ranges,
// the regression marks, the remainder file and IDS.INFO stay in counter values, which is what
// the store holds. A single-region deployment uses the Generator itself, so its INCR pays
// nothing for regions.
//
// INCRBY cannot reserve count > 1 contiguous IDs here (a region's IDs are N apart): it is
// refused with ErrLimit, "max 1"; IDS.SEGMENT serves batches.
//
// Regional is safe for concurrent use.
type Regional struct {
	*Generator
	R      Region
	maxCtr int64
}

// NewRegional wraps g for region r (r must be valid and not single).
func NewRegional(g *Generator, r Region) *Regional {
	return &Regional{Generator: g, R: r, maxCtr: r.MaxCounter()}
}

func (g *Regional) id(tag string, x int64) (int64, error) {
	if x > g.maxCtr {
		return 0, tagError(tag, ErrLimit, fmt.Sprintf("counter %d: region %s's ID would pass the largest int64", x, g.R))
	}
	return x*g.R.N + g.R.K, nil
}

// Next returns the next ID of tag in region R.
func (g *Regional) Next(tag string) (int64, error) {
	x, err := g.Generator.Next(tag)
	if err != nil {
		return 0, err
	}
	return g.id(tag, x)
}

// NextN serves INCRBY: count 1 only (see Regional).
func (g *Regional) NextN(tag string, n int64) (int64, error) {
	if n != 1 {
		return 0, tagError(tag, ErrLimit, fmt.Sprintf(
			"count %d exceeds what a segment holds contiguously in region %s (max 1: a region's IDs are %d apart; use IDS.SEGMENT)", n, g.R, g.R.N))
	}
	return g.Next(tag)
}

// AppendIDs appends n strictly increasing IDs of tag in region R.
func (g *Regional) AppendIDs(dst []int64, tag string, n int) ([]int64, error) {
	base := len(dst)
	dst, err := g.Generator.AppendIDs(dst, tag, n)
	if err != nil {
		return dst, err
	}
	for i := base; i < len(dst); i++ {
		v, err := g.id(tag, dst[i])
		if err != nil {
			return dst[:base], err
		}
		dst[i] = v
	}
	return dst, nil
}

// Create creates t whose MaxID (START, the first ID) is an ID of region R: the row starts at
// the counter of the first ID of R at or above it.
func (g *Regional) Create(ctx context.Context, t Tag) error {
	t.MaxID = max(g.R.Counter(t.MaxID), 1)
	return g.Generator.Create(ctx, t)
}

// The region record: the layout (region k of n) a store's counters are issued in. MySQL keeps
// it in the one-row table leafd_region, the embedded store in its "region" bucket. A store
// without a record is a single-region store; it stays without one as long as only
// single-region instances use it (an existing Leaf table is not touched).

// RegionStore is a store that records its region layout: *mysqlstore.MySQLStore,
// *boltstore.BoltStore.
type RegionStore interface {
	// Region returns the recorded layout; ok is false when none is recorded.
	Region(ctx context.Context) (r Region, ok bool, err error)
	// InitRegion records r when no layout is recorded and returns the recorded one.
	InitRegion(ctx context.Context, r Region) (Region, error)
	// SetRegion records r, replacing any record (the region procedures of docs/MYSQL.md).
	SetRegion(ctx context.Context, r Region) error
	Tags(ctx context.Context) ([]string, error)
}

// Normal returns r, with the single region written as region 0 of 1 whatever its K.
func (r Region) Normal() Region {
	if r.Single() {
		return Region{0, 1}
	}
	return r
}

// CheckRegion refuses (ErrRegionMismatch) a start in region want on st when st records another
// layout, or when st records none but already has tags and want is not the single region (a
// single-region table joins regions by the adoption procedure, which sets every region's
// counters apart first). A store with neither a record nor tags is recorded as want.
func CheckRegion(ctx context.Context, st RegionStore, want Region) error {
	want = want.Normal()
	had, ok, err := st.Region(ctx)
	if err != nil {
		return fmt.Errorf("segment: read the region record: %w", err)
	}
	if !ok {
		if want.Single() {
			return nil
		}
		tags, err := st.Tags(ctx)
		if err != nil {
			return fmt.Errorf("segment: region check: %w", err)
		}
		if len(tags) > 0 {
			return fmt.Errorf("%w: the store has %d tags and no region record (a single-region store); "+
				"its IDs would be issued again by other regions: join it to regions with `leafd region` first (docs/MYSQL.md, \"Regions\")",
				ErrRegionMismatch, len(tags))
		}
		if had, err = st.InitRegion(ctx, want); err != nil {
			return fmt.Errorf("segment: record the region: %w", err)
		}
	}
	if had = had.Normal(); had != want {
		return fmt.Errorf("%w: the store is recorded as region %s, this start has --region %s; "+
			"point each region at its own database, or change the layout by the procedure of docs/MYSQL.md, \"Regions\"",
			ErrRegionMismatch, had, want)
	}
	return nil
}
