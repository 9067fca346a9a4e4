package handlers

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
)

// TestIDsMarksCursor: IDS.MARKS answers at any number of marks. Without a cursor a list over
// the output limit is LIMIT naming the cursor form; with a cursor it pages like IDS.TAGS,
// each page fitting the limit, and returns every mark of the marks file exactly once, with
// its value, tags never held by this run (retired tags, old periods) included.
func TestIDsMarksCursor(t *testing.T) {
	const n = 3000
	dir := t.TempDir()
	mf, err := boltstore.OpenMarkFile(filepath.Join(dir, "marks.db"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	var ms []segment.Mark
	for i := range n {
		m := segment.Mark{Tag: fmt.Sprintf("tag-%05d", i), End: int64(1000 + i)}
		ms = append(ms, m)
		want[m.Tag] = m.End
	}
	if err := mf.RaiseAll(ms); err != nil {
		t.Fatal(err)
	}
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOpts{autoCreate: true, dir: dir, markFile: true, noWarm: true, maxOutput: 4 << 10})
	c := s.client(t, 2, "")
	ctx := context.Background()
	err = c.Do(ctx, "IDS.MARKS").Err()
	if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("LIMIT IDS.MARKS reply of %d marks", n)) || !strings.Contains(err.Error(), "IDS.MARKS 0 COUNT") {
		t.Fatalf("IDS.MARKS over the output limit: got %v, want LIMIT naming the cursor form", err)
	}
	seen := map[string]int{}
	cursor, pages := "0", 0
	for {
		v, err := c.Do(ctx, "IDS.MARKS", cursor, "COUNT", 5000).Slice()
		if err != nil {
			t.Fatalf("IDS.MARKS %s: %v", cursor, err)
		}
		pages++
		page := v[1].([]any)
		if len(page)%2 != 0 || (len(page) == 0 && v[0] != "0") {
			t.Fatalf("IDS.MARKS %s: page of %d elements, want tag, mark pairs and no empty page before the end", cursor, len(page))
		}
		for i := 0; i < len(page); i += 2 {
			tag, end := page[i].(string), page[i+1].(int64)
			seen[tag]++
			if end != want[tag] {
				t.Errorf("IDS.MARKS: %s = %d, want %d", tag, end, want[tag])
			}
		}
		cursor = v[0].(string)
		if cursor == "0" {
			break
		}
		if pages > n {
			t.Fatal("IDS.MARKS: the cursor never returns to 0")
		}
	}
	if pages < 3 {
		t.Errorf("IDS.MARKS COUNT 5000 under a 4 KiB limit: %d pages, want the pages shortened to fit", pages)
	}
	for tag := range want {
		if seen[tag] != 1 {
			t.Errorf("mark %s returned %d times, want exactly once", tag, seen[tag])
		}
	}
	if len(seen) != n {
		t.Errorf("IDS.MARKS pages: %d tags, want %d", len(seen), n)
	}
	// An exact page size ends with cursor 0, not with an empty page after it.
	v, err := c.Do(ctx, "IDS.MARKS", "0", "COUNT", 3).Slice()
	if err != nil || len(v[1].([]any)) != 6 || v[0] == "0" {
		t.Fatalf("IDS.MARKS 0 COUNT 3: got %v, %v; want 3 marks and a cursor", v, err)
	}
	last := fmt.Sprintf("%x", "tag-02997")
	v, err = c.Do(ctx, "IDS.MARKS", last, "COUNT", 2).Slice()
	if err != nil || len(v[1].([]any)) != 4 || v[0] != "0" {
		t.Errorf("IDS.MARKS before the last 2 marks, COUNT 2: got %v, %v; want 2 marks and cursor 0", v, err)
	}
	for _, args := range [][]any{{"IDS.MARKS", "zz"}, {"IDS.MARKS", "0", "COUNT", 0}, {"IDS.MARKS", "0", "LIMIT", 3}} {
		if err := c.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR") {
			t.Errorf("%v: got %v, want ERR", args, err)
		}
	}
}
