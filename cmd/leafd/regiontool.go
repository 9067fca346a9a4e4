package main

// leafd region: the region procedures of docs/MYSQL.md, "Regions" — a single-region table
// joined to n regions, and n regions grown (or shrunk) to m. Every instance of every region is
// stopped first. The tool reads every old region's leaf_alloc, computes per tag the highest ID
// any old region can have issued, and sets each new region's counters so that its first ID is
// above it (max_id only ever moves up), then records each new database's layout.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/mysqlstore"
	"go.uber.org/zap"
)

const regionToolUsage = `usage: leafd region --from DSN [--from DSN...] --to DSN [--to DSN...] [--dry-run]

Changes the region layout of leafd's databases, with every leafd instance of every region
stopped. The i-th --from is old region i of n (n = the number of --from; a single database
without a region record is the single region, n = 1); the j-th --to becomes region j of m.
A database may be both an old and a new region. For every tag of the old regions, each new
region's max_id is raised (never lowered) so that its first ID lies above every ID the old
regions can have issued; a tag missing in a new region's database is created there. Then
each new database records its layout (leafd_region), which every start checks.

`

// dsnList is a repeated DSN flag.
type dsnList []string

func (l *dsnList) String() string     { return strings.Join(*l, " ") }
func (l *dsnList) Set(s string) error { *l = append(*l, s); return nil }

// regionPlan is one tag of one new region.
type regionPlan struct {
	tag           string
	before, after int64 // max_id; before -1: no row
	step          int64
}

func runRegionTool(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leafd region", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, regionToolUsage); fs.PrintDefaults() }
	var from, to dsnList
	fs.Var(&from, "from", "DSN of old region i (repeat in region order)")
	fs.Var(&to, "to", "DSN of new region j (repeat in region order)")
	dryRun := fs.Bool("dry-run", false, "show the plan; write nothing")
	timeout := fs.Duration("timeout", 10*time.Second, "timeout of each database call")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(from) == 0 || len(to) == 0 || fs.NArg() > 0 || len(from) > segment.MaxRegions || len(to) > segment.MaxRegions {
		fs.Usage()
		return 2
	}
	plans, err := regionChange(ctx, from, to, *dryRun, *timeout)
	for j, ps := range plans {
		fmt.Fprintf(stdout, "region %d/%d:\n", j, len(to))
		w := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(w, "  TAG\tMAX_ID BEFORE\tMAX_ID AFTER")
		for _, p := range ps {
			b := fmt.Sprint(p.before)
			if p.before < 0 {
				b = "(no row)"
			}
			fmt.Fprintf(w, "  %s\t%s\t%d\n", p.tag, b, p.after)
		}
		_ = w.Flush()
	}
	if err != nil {
		fmt.Fprintln(stderr, "leafd region:", err)
		return 1
	}
	if *dryRun {
		fmt.Fprintln(stdout, "dry run: nothing written")
	}
	return 0
}

// regionChange runs the procedure (see the file comment) and returns each new region's plan.
func regionChange(ctx context.Context, from, to []string, dryRun bool, timeout time.Duration) ([][]regionPlan, error) {
	open := func(dsn string) (*mysqlstore.MySQLStore, error) {
		c := mysqlstore.DefaultMySQLConfig()
		c.DSN, c.QueryTimeout, c.CreateTable = dsn, timeout, !dryRun
		return mysqlstore.OpenMySQL(ctx, c, zap.NewNop())
	}
	// The highest ID each tag can have issued in the old layout: old region i's counter x
	// below max_id X stands for IDs up to (X-1)*n + i.
	n := int64(len(from))
	high := map[string]int64{}
	steps := map[string]int64{}
	for i, dsn := range from {
		st, err := open(dsn)
		if err != nil {
			return nil, fmt.Errorf("--from %d: %w", i, err)
		}
		r, ok, err := st.Region(ctx)
		if err == nil && !ok && n > 1 {
			err = fmt.Errorf("%w: it has no region record, but it is given as old region %d/%d", segment.ErrRegionMismatch, i, n)
		}
		if err == nil && ok && (r.N != n || r.K != int64(i)) && !(n == 1 && r.Single()) {
			err = fmt.Errorf("%w: it is recorded as region %s, but it is given as old region %d/%d", segment.ErrRegionMismatch, r, i, n)
		}
		var rows []segment.Tag
		if err == nil {
			rows, err = st.Rows(ctx)
		}
		_ = st.Close()
		if err != nil {
			return nil, fmt.Errorf("--from %d: %w", i, err)
		}
		for _, t := range rows {
			if t.MaxID >= 1 {
				high[t.Name] = max(high[t.Name], (t.MaxID-1)*n+int64(i))
			}
			steps[t.Name] = max(steps[t.Name], t.Step)
		}
	}
	tags := make([]string, 0, len(high))
	for tag := range steps {
		tags = append(tags, tag)
	}
	slices.Sort(tags)
	m := int64(len(to))
	plans := make([][]regionPlan, len(to))
	for j, dsn := range to {
		st, err := open(dsn)
		if err != nil {
			return plans, fmt.Errorf("--to %d: %w", j, err)
		}
		plans[j], err = regionApply(ctx, st, segment.Region{K: int64(j), N: m}, tags, high, steps, dryRun, timeout)
		_ = st.Close()
		if err != nil {
			return plans, fmt.Errorf("--to %d: %w", j, err)
		}
	}
	return plans, nil
}

// regionApply sets every tag of new region r in st above the old regions' highest IDs and
// records r (the record last: a start checks it, so an interrupted run leaves the database
// refusing until the tool runs again).
func regionApply(ctx context.Context, st *mysqlstore.MySQLStore, r segment.Region, tags []string,
	high, steps map[string]int64, dryRun bool, timeout time.Duration) ([]regionPlan, error) {
	var plans []regionPlan
	for _, tag := range tags {
		// The first ID of counter f is f*m + j >= f*m > high.
		f := max(high[tag]/r.N+1, 1)
		cur, err := st.MaxID(ctx, tag)
		p := regionPlan{tag: tag, before: cur, after: max(cur, f), step: steps[tag]}
		switch {
		case errors.Is(err, segment.ErrUnknownTag):
			p.before, p.after = -1, f
			if !dryRun {
				err = st.Create(ctx, segment.Tag{Name: tag, MaxID: f, Step: p.step, Description: "leafd region"})
			} else {
				err = nil
			}
		case err == nil && cur < f && !dryRun:
			_, _, err = mysqlstore.RaiseMaxID(ctx, st.DB(), tag, f, false, timeout)
		}
		if err != nil {
			return plans, fmt.Errorf("tag %q: %w", tag, err)
		}
		if !dryRun && p.before < 0 {
			if p.after, err = st.MaxID(ctx, tag); err != nil {
				return plans, fmt.Errorf("tag %q: %w", tag, err)
			}
		}
		plans = append(plans, p)
	}
	if dryRun {
		return plans, nil
	}
	return plans, st.SetRegion(ctx, r)
}
