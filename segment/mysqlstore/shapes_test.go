package mysqlstore

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// TestCreateShapeRetriesDeadlock: a CreateShape chosen as a deadlock victim runs again (as
// Create does) instead of failing with an internal error.
func TestCreateShapeRetriesDeadlock(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := fenced(t, dsn)
	var calls int
	s.hooks.afterShapeCheck = func(context.Context) error {
		calls++
		if calls == 1 {
			return &mysql.MySQLError{Number: mysqlErrDeadlock, Message: "Deadlock found when trying to get lock (injected)"}
		}
		return nil
	}
	if err := s.CreateShape(context.Background(), "sh", []byte(`{"format":"x"}`)); err != nil {
		t.Fatalf("CreateShape after an injected deadlock: %v", err)
	}
	if calls != 2 || s.Deadlocks() != 1 {
		t.Errorf("%d attempts, %d deadlocks counted; want 2 and 1", calls, s.Deadlocks())
	}
	if got := sqlQuery(t, dsn, "SELECT COUNT(*) FROM leafd_tag_shape WHERE biz_tag = 'sh'"); got != "1" {
		t.Errorf("shape rows: %s, want 1", got)
	}
}

// TestCreateExclusionRepeatableRead: a plain Create and a CreateShape of one name, ordered so
// that each has locked the other's key (the missing key: a gap lock) before inserting its own
// row, never both commit: one wins, the other fails cleanly (SHAPED or TAGEXISTS). Under READ
// COMMITTED no gap lock is taken and both commit (the race of concurrent creations, made
// deterministic).
func TestCreateExclusionRepeatableRead(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := fenced(t, dsn)
	ctx := context.Background()
	if err := s.Create(ctx, segment.Tag{Name: "warm", Step: 10}); err != nil { // the fence rows exist
		t.Fatal(err)
	}
	plainLocked, shapeLocked := make(chan struct{}), make(chan struct{})
	var onceA, onceB sync.Once
	s.hooks.afterShapeLock = func(ctx context.Context) error {
		first := false
		onceA.Do(func() { first = true; close(plainLocked) })
		if first {
			select { // go on once CreateShape holds its lock on the leaf_alloc key
			case <-shapeLocked:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	s.hooks.afterShapeCheck = func(ctx context.Context) error {
		onceB.Do(func() { close(shapeLocked) })
		return nil
	}
	plainErr, shapeErr := make(chan error, 1), make(chan error, 1)
	go func() { plainErr <- s.Create(ctx, segment.Tag{Name: "x", Step: 10}) }()
	<-plainLocked
	go func() { shapeErr <- s.CreateShape(ctx, "x", []byte(`{"format":"x"}`)) }()
	pe, se := <-plainErr, <-shapeErr
	switch {
	case pe == nil && se == nil:
		t.Fatalf("both the plain and the shaped creation of 'x' committed (rows: %s plain, %s shaped)",
			sqlQuery(t, dsn, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'x'"),
			sqlQuery(t, dsn, "SELECT COUNT(*) FROM leafd_tag_shape WHERE biz_tag = 'x'"))
	case pe != nil && se != nil:
		t.Fatalf("both failed: plain %v, shaped %v; want one to win", pe, se)
	case pe != nil && !errors.Is(pe, segment.ErrShaped):
		t.Errorf("plain creation lost with %v, want SHAPED", pe)
	case se != nil && !errors.Is(se, segment.ErrTagExists):
		t.Errorf("shaped creation lost with %v, want TAGEXISTS", se)
	}
	plain := sqlQuery(t, dsn, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'x'")
	shaped := sqlQuery(t, dsn, "SELECT COUNT(*) FROM leafd_tag_shape WHERE biz_tag = 'x'")
	if plain == shaped {
		t.Errorf("rows of 'x': %s plain, %s shaped; want exactly one of them", plain, shaped)
	}
	t.Logf("plain: %v; shaped: %v; deadlocks retried: %d", pe, se, s.Deadlocks())
}
