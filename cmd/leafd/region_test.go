package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/snowflake"
)

// fixedSource hands out one worker id.
type fixedSource struct{ id int64 }

func (s fixedSource) Acquire(context.Context) (snowflake.Worker, error) {
	return snowflake.Worker{ID: s.id, Source: "fixed"}, nil
}
func (fixedSource) Extend(context.Context, time.Time) error { return nil }
func (fixedSource) Close() error                            { return nil }

// TestRegionSource: a source's id is moved into the region's range, and an id at or above the
// range's size from any source is refused, never moved into the next region's range.
func TestRegionSource(t *testing.T) {
	r := segment.Region{K: 1, N: 2}
	base, span, err := regionWorkers(r, 1023)
	if err != nil || base != 512 || span != 512 {
		t.Fatalf("regionWorkers(1/2, 1023) = %d, %d, %v; want 512, 512", base, span, err)
	}
	for _, tc := range []struct {
		name string
		id   int64
		want int64 // -1: refused
	}{
		{"first", 0, 512},
		{"last", 511, 1023},
		{"past the range", 512, -1},
		{"negative", -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := inRegion(fixedSource{tc.id}, r, base, span).Acquire(context.Background())
			if tc.want < 0 && err == nil || tc.want >= 0 && (err != nil || w.ID != tc.want) {
				t.Errorf("source id %d: got %d, %v; want %d (-1: refused)", tc.id, w.ID, err, tc.want)
			}
		})
	}
	if _, _, err := regionWorkers(segment.Region{K: 0, N: 3}, 1); err == nil {
		t.Errorf("3 regions on 2 worker ids: want an error")
	}
	if src := inRegion(fixedSource{7}, segment.Region{}, 0, 1024); src != (fixedSource{7}) {
		t.Errorf("single region: got %T, want the source itself", src)
	}
}

// TestRegionConfig: --region and LEAFD_REGION are read and validated.
func TestRegionConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := loadConfig(nil, env(map[string]string{"LEAFD_REGION": "1/3"}), io.Discard)
	if err != nil || c.region() != (segment.Region{K: 1, N: 3}) {
		t.Errorf("LEAFD_REGION=1/3: got %v, %v; want region 1/3", c.region(), err)
	}
	for _, bad := range []string{"3/3", "0/0", "x", "1/300"} {
		if _, err := loadConfig([]string{"--region", bad}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "--region") {
			t.Errorf("--region %s: got %v, want an error naming --region", bad, err)
		}
	}
}
