package ids

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/shape"
)

// memSegments is a segment core that serves every tag from one counter, in memory.
type memSegments struct{ n atomic.Int64 }

func (m *memSegments) Next(string) (int64, error)             { return m.n.Add(1), nil }
func (m *memSegments) NextN(_ string, n int64) (int64, error) { return m.n.Add(n), nil }
func (m *memSegments) AppendIDs(dst []int64, _ string, n int) ([]int64, error) {
	for range n {
		dst = append(dst, m.n.Add(1))
	}
	return dst, nil
}
func (m *memSegments) Serves(string, int64) bool                 { return true }
func (m *memSegments) Info(tag string) (segment.Info, error)     { return segment.Info{Tag: tag}, nil }
func (m *memSegments) Tags() []string                            { return nil }
func (m *memSegments) Create(context.Context, segment.Tag) error { return nil }
func (m *memSegments) Retire(string) bool                        { return false }

type noCatalog struct{}

func (noCatalog) IsOrdered(context.Context, string) (bool, error) { return false, nil }
func (noCatalog) List(context.Context) ([]string, error)          { return nil, nil }

// routers returns a router with no shaped or ordered tag, and one that knows one of each
// (neither is the plain tag the tests ask for).
func routers(t testing.TB) map[string]*Router {
	t.Helper()
	bare := New(Config{}, &memSegments{}, zap.NewNop())
	m, err := ordered.NewManager(ordered.ManagerConfig{Local: true}, noCatalog{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Add("ord"); err != nil {
		t.Fatal(err)
	}
	busy := New(Config{Ordered: m}, &memSegments{}, zap.NewNop())
	s, err := shape.Compile("shaped", shape.Spec{Format: "S{seq:6}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	busy.shapes.add(s)
	return map[string]*Router{"no shaped or ordered tag": bare, "shaped and ordered tags known": busy}
}

// TestPlainPathAllocs: INCR and INCRBY of a plain tag, and the question whether it would wait, allocate
// nothing, whatever other kinds of tags the router knows.
func TestPlainPathAllocs(t *testing.T) {
	for name, r := range routers(t) {
		t.Run(name, func(t *testing.T) {
			if r.resolve("plain").kind != plain {
				t.Fatal("the plain tag resolves to another kind")
			}
			if a := testing.AllocsPerRun(1000, func() {
				if _, fw, err := r.Incr("plain"); err != nil || fw.Tag != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("Incr: %v allocations, want 0", a)
			}
			if a := testing.AllocsPerRun(1000, func() {
				if _, wait := r.WaitRow("plain"); wait {
					t.Fatal("WaitRow of a served plain tag: wait")
				}
			}); a != 0 {
				t.Errorf("WaitRow: %v allocations, want 0", a)
			}
			if a := testing.AllocsPerRun(1000, func() {
				if _, fw, err := r.IncrBy("plain", 3); err != nil || fw.Tag != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("IncrBy: %v allocations, want 0", a)
			}
			var buf [4]int64
			if a := testing.AllocsPerRun(1000, func() { _, _, _ = r.Segment(buf[:0], "plain", 4) }); a != 0 {
				t.Errorf("Segment: %v allocations, want 0", a)
			}
		})
	}
}

// TestResolveKinds: the one decision, for each kind.
func TestResolveKinds(t *testing.T) {
	r := routers(t)["shaped and ordered tags known"]
	for _, tc := range []struct {
		name, tag string
		want      kind
	}{{"plain", "plain", plain}, {"shaped", "shaped", shaped}, {"ordered", "ord", orderedKind}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.resolve(tc.tag).kind; got != tc.want {
				t.Errorf("resolve(%q): got kind %d, want %d", tc.tag, got, tc.want)
			}
		})
	}
}

// BenchmarkIncr is the router's cost on a plain INCR beside a direct call of the segment
// core (ratio: direct time / routed time; 1 means the router costs nothing measurable).
func BenchmarkIncr(b *testing.B) {
	for name, r := range routers(b) {
		b.Run(name, func(b *testing.B) {
			seg := r.seg
			b.ReportAllocs()
			var direct, routed int64
			const block = 1024
			for i := 0; i < b.N; i += 2 * block {
				t0 := nanotime()
				for range block {
					_, _ = seg.Next("plain")
				}
				t1 := nanotime()
				for range block {
					_, _, _ = r.Incr("plain")
				}
				direct += t1 - t0
				routed += nanotime() - t1
			}
			b.ReportMetric(float64(direct)/float64(routed), "ratio")
		})
	}
}

func nanotime() int64 { return time.Now().UnixNano() }
