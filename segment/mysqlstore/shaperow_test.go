package mysqlstore

import (
	"context"
	"errors"
	"testing"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// TestMySQLCreateBatchShapedPrefix: in a creation batch, a plain row d@x of the shaped tag d
// is refused (SHAPED) and not inserted, while d's own row (Tag.Row) and plain tags are created.
func TestMySQLCreateBatchShapedPrefix(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := fenced(t, dsn)
	ctx := context.Background()
	if err := s.CreateShape(ctx, "d", []byte(`{"format":"D{yyyyMMdd}{seq:6}","reset":"day"}`)); err != nil {
		t.Fatal(err)
	}
	queued, release := holdCreations(t, s, dsn, "held")
	type res struct {
		name string
		err  error
	}
	out := make(chan res, 4)
	for _, tg := range []segment.Tag{{Name: "p1", Step: 10}, {Name: "p2", Step: 10}, {Name: "d@x", Step: 10}, {Name: "d@20261201", Step: 10, Row: &segment.ShapeRow{}}} {
		go func() { out <- res{tg.Name, s.Create(ctx, tg)} }()
	}
	queued(4)
	release()
	for range 4 {
		r := <-out
		switch {
		case r.name == "d@x" && !errors.Is(r.err, segment.ErrShaped):
			t.Errorf("plain d@x: %v, want ErrShaped", r.err)
		case r.name != "d@x" && r.err != nil:
			t.Errorf("%s: %v", r.name, r.err)
		}
	}
	if got := sqlQuery(t, dsn, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'd@x'"); got != "0" {
		t.Errorf("rows d@x: %s, want 0", got)
	}
}
