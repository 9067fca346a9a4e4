package main

// --region k/n: this deployment is region k of n independent ones (docs/MYSQL.md, "Regions";
// docs/SNOWFLAKE.md, "Regions"). Segment IDs: the store's counter x leaves as x*n + k
// (segment.Regional); snowflake: worker ids [k*span, (k+1)*span) with span = (max+1)/n, every
// source numbering within the region. The store records the layout; a start that differs is
// refused before anything is served.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/mysqlstore"
	"github.com/leafd/leafd/snowflake"
	"go.uber.org/zap"
)

const regionUsage = "this deployment is region k of n (k/n, e.g. 0/2): segment IDs are ≡ k mod n " +
	"(counter x issues x*n+k) and snowflake worker ids lie in the k-th n-th of the worker-id space; " +
	"the store records the layout and refuses another; empty: the single region"

// regionFile is the data dir's record of the region its remainder and worker id were issued in.
const regionFile = "region"

func (c Config) validateRegion(bad func(string, ...any)) {
	if _, err := segment.ParseRegion(c.Region); err != nil {
		bad("--region: %v", err)
	}
}

// region is --region, validated by loadConfig.
func (c Config) region() segment.Region {
	r, _ := segment.ParseRegion(c.Region)
	return r
}

// regionSegments is what the handlers serve: the generator itself in the single region (INCR
// pays nothing for regions), else its Regional.
func regionSegments(g *segment.Generator, r segment.Region) handlers.Segments {
	if r.Single() {
		return g
	}
	return segment.NewRegional(g, r)
}

// checkRegion compares --region with the store's record (segment.CheckRegion) before the
// generator serves anything. With more than one region a store that cannot be read refuses the
// start (uniqueness first); the single region starts as it always did when the store is down.
func checkRegion(ctx context.Context, cfg Config, store segment.Store, log *zap.Logger) error {
	r := cfg.region()
	var rs segment.RegionStore
	switch s := store.(type) {
	case segment.RegionStore:
		rs = s
	default:
		if cfg.MySQLDSN == "" { // --modes snowflake on the embedded store: nothing recorded
			return nil
		}
		// --modes snowflake with the MySQL worker source: the same database's record.
		mcfg := mysqlstore.DefaultMySQLConfig()
		mcfg.DSN = cfg.MySQLDSN
		mcfg.CreateTable = false
		mcfg.QueryTimeout = cfg.LoadTimeout
		st, err := mysqlstore.OpenMySQL(ctx, mcfg, log.Named("mysql"))
		if err != nil {
			return err
		}
		defer st.Close()
		rs = st
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.LoadTimeout)
	defer cancel()
	err := segment.CheckRegion(cctx, rs, r)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, segment.ErrRegionMismatch):
		return fmt.Errorf("--region %s: %w", r, err)
	case r.Single():
		log.Warn("segment: the store's region record cannot be read; starting as the single region", zap.Error(err))
		return nil
	default:
		return fmt.Errorf("--region %s: the store's region record cannot be read, and a region never starts unchecked: %w", r, err)
	}
}

// useDataDirRegion records the region in the data dir. The remainder file holds counter
// values, which stand for other IDs in another layout: after a change of --region it is
// dropped (a gap), never served.
func useDataDirRegion(cfg Config, remainder string, log *zap.Logger) error {
	r := cfg.region()
	p := filepath.Join(cfg.DataDir, regionFile)
	b, err := os.ReadFile(p)
	had := "0/1" // a data dir without the record was used by the single region
	switch {
	case err == nil:
		had = strings.TrimSpace(string(b))
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("data dir region record: %w", err)
	}
	if had == r.String() {
		return nil
	}
	if err := os.Remove(remainder); err == nil {
		log.Warn("segment: the remainder of the earlier run is dropped: it was issued in another region layout",
			zap.String("had", had), zap.String("region", r.String()))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("drop the remainder of region %s: %w", had, err)
	}
	if err := os.WriteFile(p+".tmp", []byte(r.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("data dir region record: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("data dir region record: %w", err)
	}
	return nil
}

// regionWorkers is region r's worker-id range [base, base+span) of a layout with ids 0..maxID.
func regionWorkers(r segment.Region, maxID int64) (base, span int64, err error) {
	if r.Single() {
		return 0, maxID + 1, nil
	}
	span = (maxID + 1) / r.N
	if span < 1 {
		return 0, 0, fmt.Errorf("--region %s: the layout has %d worker ids, fewer than %d regions (more worker bits: --snowflake-bits)", r, maxID+1, r.N)
	}
	return r.K * span, span, nil
}

// regionSource numbers a worker-id source within the region: the source hands out ids in
// [0, span) (its maximum is span-1), the generator gets base + that id.
type regionSource struct {
	snowflake.WorkerSource
	base, span int64
}

func (s regionSource) Acquire(ctx context.Context) (snowflake.Worker, error) {
	w, err := s.WorkerSource.Acquire(ctx)
	if err != nil {
		return w, err
	}
	if w.ID < 0 || w.ID >= s.span {
		return snowflake.Worker{}, fmt.Errorf("snowflake: worker id %d from %s is outside the region's %d ids (0..%d)", w.ID, w.Source, s.span, s.span-1)
	}
	w.ID += s.base
	return w, nil
}

// UseLayout forwards the layout to a source that records it.
func (s regionSource) UseLayout(l snowflake.Layout) {
	if lu, ok := s.WorkerSource.(snowflake.LayoutUser); ok {
		lu.UseLayout(l)
	}
}

// regionLeaseSource is a regionSource on a leased source (MySQL), which Info reports.
type regionLeaseSource struct{ regionSource }

func (s regionLeaseSource) LeaseInfo() snowflake.LeaseInfo {
	return s.WorkerSource.(snowflake.LeaseReporter).LeaseInfo()
}

// inRegion wraps src for region r; single region: src itself.
func inRegion(src snowflake.WorkerSource, r segment.Region, base, span int64) snowflake.WorkerSource {
	if r.Single() {
		return src
	}
	rs := regionSource{src, base, span}
	if _, ok := src.(snowflake.LeaseReporter); ok {
		return regionLeaseSource{rs}
	}
	return rs
}
