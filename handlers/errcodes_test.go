package handlers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/errcode"
	"github.com/leafd/leafd/internal/storeerr"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/segtest"
	"github.com/leafd/leafd/snowflake"
	"go.uber.org/zap"
)

// produced is one error reply of a real request: the handler that answered it, the reply
// text (code first) and, for Leaf's HTTP API, the HTTP status (0 over RESP).
type produced struct {
	h      *Handler
	reply  string
	status int
}

// TestErrorCodeTable walks internal/errcode's table: every code is produced by a real
// request (RESP, or Leaf's HTTP API where only a failing core produces it), starts the
// reply, is counted under its own label of leafd_command_errors_total (none as "other"),
// and maps to an HTTP error status, which Leaf's HTTP API answers.
func TestErrorCodeTable(t *testing.T) {
	got := map[string]produced{}
	add := func(h *Handler, replies ...string) {
		t.Helper()
		for _, r := range replies {
			code, _, _ := strings.Cut(r, " ")
			if _, dup := got[code]; !dup {
				got[code] = produced{h: h, reply: r}
			}
		}
	}

	// RESP: one server, its password set, auto-create off, shapes on.
	s := startServer(t, serverOpts{requirePass: "pw", shapes: true})
	add(s.h, respErrors(t, s.addr,
		"AUTH pw", "IDS.CREATE t1", "IDS.CREATE t1", "INCR missing", "INCR "+strings.Repeat("x", 200),
		"INCRBY t1 x", "INCRBY t1 100000000", "HELLO 4",
		"IDS.CREATE sh FORMAT S{seq:6}", "INCRBY sh 2", "IDS.PARSE t1 1", "IDS.PARSE sh garbage",
		"IDS.CREATE bad FORMAT A{seq:3} START 1000", "IDS.CREATE op OPAQUE",
		"MULTI", "INCRBY t1", "EXEC",
		"CLIENT TRACKING on OPTIN", "CLIENT CACHING yes", "INCR t1")...)
	add(s.h, respErrors(t, s.addr, "HELLO 3", "AUTH wrong")...)
	s2 := startServer(t, serverOpts{autoCreate: true, disableCreate: true, config: func(c *Config) { c.NoSnowflake = true }})
	add(s2.h, respErrors(t, s2.addr, "IDS.CREATE x", "IDS.SNOWFLAKE")...)

	// Ordered tags: TRYAGAIN at an instance that does not know the leader yet, LEADER once
	// it does, to a connection that asked for redirects.
	cl := newOrdCluster(t)
	a := cl.start(t, ordOpts{manual: true})
	b := cl.start(t, ordOpts{manual: true})
	if err := a.client(t).Do(context.Background(), "IDS.CREATE", "seq", "ORDERED").Err(); err != nil {
		t.Fatal(err)
	}
	a.round(t)
	add(b.h, respErrors(t, b.addr, "INCR seq")...)
	b.round(t)
	add(b.h, respErrors(t, b.addr, "IDS.REDIRECT ON", "INCR seq")...)

	// Leaf's HTTP API on failing cores: what only a store, a mark or a clock produces.
	for _, c := range []struct {
		store segment.Store
		marks segment.Marks
		snow  Snowflakes
		path  string
	}{
		{segtest.DownStore{}, segtest.NoMarks{}, nil, "/api/segment/get/down"},
		{errStore{err: &storeerr.Error{Class: storeerr.Auth, Err: errors.New("access denied")}}, segtest.NoMarks{}, nil, "/api/segment/get/x"},
		{errStore{err: fmt.Errorf("no fence row: %w", segment.ErrNotAdopted)}, segtest.NoMarks{}, nil, "/api/segment/get/x"},
		{grantStore{}, highMarks{}, nil, "/api/segment/get/x"},
		{segtest.DownStore{}, segtest.NoMarks{}, nil, "/api/snowflake/get/x"},
		{segtest.DownStore{}, segtest.NoMarks{}, failSnow{fmt.Errorf("%w by 50ms", snowflake.ErrClockBack)}, "/api/snowflake/get/x"},
		{segtest.DownStore{}, segtest.NoMarks{}, failSnow{snowflake.ErrOverflow}, "/api/snowflake/get/x"},
	} {
		cfg := segment.DefaultConfig()
		cfg.AutoCreate = true
		cfg.WaitTimeout = 50 * time.Millisecond
		cfg.NoWarmStart = true
		seg, err := segment.New(cfg, c.store, c.marks, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = seg.Close() })
		h := New(Config{}, seg, c.snow, zap.NewNop())
		status, _, body := testkit.Fetch(t, httpServer(t, h), "GET", c.path)
		code, msg := testkit.ErrorBody(t, body)
		if _, dup := got[code]; !dup {
			got[code] = produced{h: h, reply: code + " " + msg, status: status}
		}
	}

	// refusals are answered before the command runs (like arity errors and the NOAUTH of a
	// connection that did not authenticate): not counted.
	refusals := map[string]bool{"NOCACHE": true}
	for _, c := range errcode.Table {
		p, ok := got[c.Name]
		if !ok {
			t.Errorf("%s: no request of this test produced it (got %v)", c.Name, keys(got))
			continue
		}
		if !strings.HasPrefix(p.reply, c.Name+" ") {
			t.Errorf("%s: reply %q does not start with the code", c.Name, p.reply)
		}
		status, _ := errcode.Status(c.Name, "")
		if status < 400 || status > 599 {
			t.Errorf("%s: HTTP status %d, want an error status", c.Name, status)
		}
		if p.status != 0 && p.status != c.HTTP {
			t.Errorf("%s: Leaf's HTTP API answered %d, the table says %d", c.Name, p.status, c.HTTP)
		}
		counts := errorSeries(t, p.h)
		if n, ok := counts[c.Name]; !ok || n == 0 && !refusals[c.Name] {
			t.Errorf("%s: leafd_command_errors_total{code=%q} = %v (present %v), want counted under its own label", c.Name, c.Name, n, ok)
		}
		if n := counts[errcode.Other]; n != 0 {
			t.Errorf("%s: %v replies counted as %q", c.Name, n, errcode.Other)
		}
	}
	for code := range got {
		if errcode.Index(code) == len(errcode.Table) {
			t.Errorf("%s: produced, but not in internal/errcode's table", code)
		}
	}
}

// respErrors sends the inline commands on one connection to addr and returns the error
// replies, without their '-'.
func respErrors(t *testing.T, addr string, cmds ...string) []string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	var errs []string
	for _, cmd := range cmds {
		if _, err := fmt.Fprintf(conn, "%s\r\n", cmd); err != nil {
			t.Fatal(err)
		}
		reply, err := readRaw(r)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if strings.HasPrefix(reply, "-") {
			errs = append(errs, strings.TrimSuffix(reply[1:], "\r\n"))
		}
	}
	return errs
}

// errorSeries scrapes h's /metrics and returns leafd_command_errors_total by code.
func errorSeries(t *testing.T, h *Handler) map[string]float64 {
	t.Helper()
	_, _, body := testkit.Fetch(t, httpServer(t, h), "GET", "/metrics")
	out := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^leafd_command_errors_total\{code="([^"]+)"\} (\S+)$`).FindAllStringSubmatch(body, -1) {
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[m[1]] = n
	}
	return out
}

func keys(m map[string]produced) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// errStore fails every call with err.
type errStore struct {
	segtest.StoreBase
	err error
}

func (s errStore) Allocate(context.Context, string, int64) (segment.Alloc, error) {
	return segment.Alloc{}, s.err
}
func (s errStore) Tags(context.Context) ([]string, error)    { return nil, s.err }
func (s errStore) Create(context.Context, segment.Tag) error { return s.err }

// grantStore grants [1, 11) to every tag; with highMarks the range is below the mark.
type grantStore struct{ segtest.DownStore }

func (grantStore) Allocate(context.Context, string, int64) (segment.Alloc, error) {
	return segment.Alloc{MaxID: 11, Step: 10}, nil
}

type highMarks struct{ segtest.MarksBase }

func (highMarks) Mark(string) (int64, error) { return 1000, nil }
func (highMarks) Raise(string, int64) error  { return nil }

// failSnow is a snowflake core whose Next fails with err.
type failSnow struct{ err error }

func (f failSnow) Next() (int64, error)                          { return 0, f.err }
func (f failSnow) AppendIDs(dst []int64, _ int) ([]int64, error) { return dst, f.err }
func (failSnow) Decode(int64) snowflake.Parts                    { return snowflake.Parts{} }
func (failSnow) Info() snowflake.Info                            { return snowflake.Info{} }
func (failSnow) MayWait(int64) bool                              { return false }
