package handlers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestIDsTagsCursor: IDS.TAGS answers at any tag count. Without a cursor a list over the
// output limit is LIMIT naming the cursor form (the connection stays open); with a cursor it
// pages like SCAN, each page fitting the limit, and returns every tag held through the whole
// iteration exactly once while others are added and retired.
func TestIDsTagsCursor(t *testing.T) {
	const n = 600
	s := startServer(t, serverOpts{autoCreate: true, maxOutput: 4 << 10})
	c := s.client(t, 2, "")
	ctx := context.Background()
	var want []string
	for i := range n {
		tag := fmt.Sprintf("tag-%05d", i)
		if err := c.Incr(ctx, tag).Err(); err != nil {
			t.Fatal(err)
		}
		want = append(want, tag)
	}
	err := c.Do(ctx, "IDS.TAGS").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "LIMIT IDS.TAGS reply of 600 tags") || !strings.Contains(err.Error(), "IDS.TAGS 0 COUNT") {
		t.Fatalf("IDS.TAGS over the output limit: got %v, want LIMIT naming the cursor form", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the LIMIT: %v (the connection must stay open)", err)
	}

	seen := map[string]int{}
	cursor, pages, added := "0", 0, 0
	for {
		v, err := c.Do(ctx, "IDS.TAGS", cursor, "COUNT", 5000).Slice()
		if err != nil {
			t.Fatalf("IDS.TAGS %s: %v", cursor, err)
		}
		pages++
		page := v[1].([]any)
		if len(page) == 0 && v[0] != "0" {
			t.Fatalf("IDS.TAGS %s: an empty page before the end", cursor)
		}
		for _, x := range page {
			seen[x.(string)]++
		}
		// Churn between pages: a new tag before and after the cursor, and one retired.
		for _, tag := range []string{fmt.Sprintf("aaa-%d", pages), fmt.Sprintf("zzz-%d", pages)} {
			if err := c.Incr(ctx, tag).Err(); err != nil {
				t.Fatal(err)
			}
			added++
		}
		if err := c.Do(ctx, "IDS.RETIRE", fmt.Sprintf("aaa-%d", pages)).Err(); err != nil {
			t.Fatal(err)
		}
		cursor = v[0].(string)
		if cursor == "0" {
			break
		}
		if pages > n {
			t.Fatal("IDS.TAGS: the cursor never returns to 0")
		}
	}
	if pages < 3 {
		t.Errorf("IDS.TAGS COUNT 5000 under a 4 KiB limit: %d pages, want the pages shortened to fit", pages)
	}
	for _, tag := range want {
		if seen[tag] != 1 {
			t.Errorf("tag %s returned %d times, want exactly once", tag, seen[tag])
		}
	}
	// The small page size and bad arguments.
	v, err := c.Do(ctx, "IDS.TAGS", "0", "COUNT", 3).Slice()
	if err != nil || len(v[1].([]any)) != 3 || v[0] == "0" {
		t.Errorf("IDS.TAGS 0 COUNT 3: got %v, %v; want 3 tags and a cursor", v, err)
	}
	first := v[1].([]any)
	if !slices.IsSortedFunc(first, func(a, b any) int { return strings.Compare(a.(string), b.(string)) }) {
		t.Errorf("IDS.TAGS page not sorted: %v", first)
	}
	for _, args := range [][]any{{"IDS.TAGS", "zz"}, {"IDS.TAGS", "0", "COUNT", 0}, {"IDS.TAGS", "0", "LIMIT", 3}} {
		if err := c.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR") {
			t.Errorf("%v: got %v, want ERR", args, err)
		}
	}
}
