package mysqlstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
)

// TestMySQLRemainder: the MySQL side. StoreID is one random identity per database, the same
// from every store opened on it; ConsumeRemainder records a token once (ErrRemainderUsed
// after); and a generator on MySQL resumes its saved rest without a gap, while a copy of the
// file put back (a restored data dir) is refused because the database remembers the token.
// TestMySQLRemainderBoundToServer: the MySQL store identity a remainder file is bound to
// names the server, so a failover (another server, whatever it replicated) discards the file.
func TestMySQLRemainderBoundToServer(t *testing.T) {
	m := testenv.StartMariaDB(t, "--server-id=7")
	m.Exec("CREATE DATABASE leafd")
	ctx := context.Background()
	before, err := openTestMySQL(t, m.DSN("leafd"), nil).StoreID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Exec("SET GLOBAL server_id = 8") // as a promoted replica is another server
	after, err := openTestMySQL(t, m.DSN("leafd"), nil).StoreID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before == after {
		t.Fatalf("StoreID %q on server 7 and on server 8: want them different", before)
	}
}

func TestMySQLRemainder(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	ctx := context.Background()
	s1 := openTestMySQL(t, dsn, nil)
	s2 := openTestMySQL(t, dsn, nil)
	id1, err := s1.StoreID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := s2.StoreID(ctx)
	if err != nil || id1 != id2 || len(id1) < 10 {
		t.Fatalf("StoreID: %q and %q (%v): want one identity per database", id1, id2, err)
	}
	other := openTestMySQL(t, testenv.FreshDatabase(t, testenv.MySQLDSN(t)), nil)
	if id3, err := other.StoreID(ctx); err != nil || id3 == id1 {
		t.Fatalf("StoreID of another database: %q (%v), want one other than %q", id3, err, id1)
	}
	tok := "0123456789abcdef0123456789abcdef"
	if err := s1.ConsumeRemainder(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s2.ConsumeRemainder(ctx, tok); !errors.Is(err, segment.ErrRemainderUsed) {
		t.Fatalf("second ConsumeRemainder: %v, want ErrRemainderUsed", err)
	}

	dir := t.TempDir()
	life := func() (*segment.Generator, *boltstore.MarkFile) {
		mk, err := boltstore.OpenMarkFile(filepath.Join(dir, "marks.db"))
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(newFakeClock())
		cfg.RemainderFile = filepath.Join(dir, "remainder.json")
		cfg.NoWarmStart = true
		g, err := segment.New(cfg, s1, mk, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		return g, mk
	}
	if err := s1.Create(ctx, segment.Tag{Name: "m", MaxID: 1, Step: 100}); err != nil {
		t.Fatal(err)
	}
	g, mk := life()
	var last int64
	for range 10 {
		last = mustNext(t, g, "m")
	}
	if _, err := g.SaveRemainder(ctx); err != nil {
		t.Fatal(err)
	}
	_ = mk.Close()
	copyOf, err := os.ReadFile(filepath.Join(dir, "remainder.json"))
	if err != nil {
		t.Fatal(err)
	}
	g, mk = life()
	for range 200 { // through the rest and into a new lease
		v := mustNext(t, g, "m")
		if v != last+1 {
			t.Fatalf("after the restart: got %d, want %d", v, last+1)
		}
		last = v
	}
	_ = g.Close() // a kill -9: nothing saved
	_ = mk.Close()
	if err := os.WriteFile(filepath.Join(dir, "remainder.json"), copyOf, 0o600); err != nil {
		t.Fatal(err)
	}
	g, mk = life()
	defer mk.Close()
	defer g.Close()
	if v := mustNext(t, g, "m"); v <= last {
		t.Fatalf("restored data dir: got %d, an ID at or below the %d already issued", v, last)
	}
	if st := g.Stats(); st.RemainderResumed != 0 || st.RemainderDiscarded == 0 {
		t.Fatalf("restored data dir: resumed %d, discarded %d", st.RemainderResumed, st.RemainderDiscarded)
	}
}
