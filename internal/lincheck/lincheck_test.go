package lincheck

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// op is a successful INCR of client c in [send, reply] with value v (seq filled by hist).
func op(c int, send, reply, v int64) Op {
	return Op{Client: c, Send: send, Reply: reply, Value: v, N: 1}
}

// opN is an INCRBY n that answered v (the caller owns [v-n+1, v]).
func opN(c int, send, reply, v, n int64) Op {
	return Op{Client: c, Send: send, Reply: reply, Value: v, N: n}
}

func fail(c int, send, reply int64, code string) Op {
	return Op{Client: c, Send: send, Reply: reply, Err: code}
}

// hist numbers each client's ops in the order given (their Seq).
func hist(ops ...Op) []Op {
	seq := map[int]int{}
	for i := range ops {
		ops[i].Seq = seq[ops[i].Client]
		seq[ops[i].Client]++
	}
	return ops
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name        string
		ops         []Op
		dups, viols int
		// wantViol, when set: the first violation's op and witness values.
		wantOp, wantBefore int64
	}{
		{name: "empty"},
		{name: "sequential, one client", ops: hist(op(0, 0, 1, 1), op(0, 2, 3, 2), op(0, 4, 5, 3))},
		{name: "sequential across clients", ops: hist(op(0, 0, 1, 1), op(1, 2, 3, 5), op(2, 4, 5, 6), op(0, 6, 7, 9))},
		{
			name: "concurrent ops may come in either order",
			ops:  hist(op(0, 0, 10, 7), op(1, 1, 9, 3), op(2, 5, 6, 4)),
		},
		{
			name:  "a reply below one received before the send",
			ops:   hist(op(0, 0, 1, 1000), op(1, 2, 3, 5)),
			viols: 1, wantOp: 5, wantBefore: 1000,
		},
		{
			name: "equal reply and send stamps of two clients are not ordered",
			ops:  hist(op(0, 0, 5, 9), op(1, 5, 6, 3)),
		},
		{
			name:  "one client's later op is ordered even on an equal stamp",
			ops:   hist(op(0, 0, 5, 9), op(0, 5, 6, 3)),
			viols: 1, wantOp: 3, wantBefore: 9,
		},
		{
			name:  "the witness is the highest reply before the send, not the latest",
			ops:   hist(op(0, 0, 1, 10), op(1, 0, 2, 5), op(2, 3, 4, 7)),
			viols: 1, wantOp: 7, wantBefore: 10,
		},
		{
			name: "an equal ID is a duplicate and a violation",
			ops:  hist(op(0, 0, 1, 4), op(1, 2, 3, 4)),
			dups: 1, viols: 1, wantOp: 4, wantBefore: 4,
		},
		{
			name: "concurrent duplicate: no order violation",
			ops:  hist(op(0, 0, 3, 4), op(1, 1, 2, 4)),
			dups: 1,
		},
		{
			name: "INCRBY ranges that overlap",
			ops:  hist(opN(0, 0, 3, 10, 5), opN(1, 1, 2, 12, 5)),
			dups: 1,
		},
		{
			name: "INCRBY whose low end is below an earlier reply",
			ops:  hist(op(0, 0, 1, 10), opN(1, 2, 3, 14, 5)),
			dups: 1, viols: 1, wantOp: 14, wantBefore: 10,
		},
		{
			name: "INCRBY above an earlier reply",
			ops:  hist(op(0, 0, 1, 10), opN(1, 2, 3, 15, 5)),
		},
		{
			name: "errors are counted and order nothing",
			ops:  hist(op(0, 0, 1, 10), fail(1, 2, 3, "TRYAGAIN"), fail(1, 4, 5, "NET"), op(1, 6, 7, 11)),
		},
		{
			name: "two instances with their own segments: trend-increasing only",
			ops: hist(op(0, 0, 1, 1), op(1, 2, 3, 1001), op(0, 4, 5, 2), op(1, 6, 7, 1002),
				op(0, 8, 9, 3)),
			viols: 2, wantOp: 2, wantBefore: 1001,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Check(tt.ops)
			if res.Duplicates != tt.dups || res.Violations != tt.viols {
				t.Fatalf("got %d duplicates and %d violations, want %d and %d\n%v", res.Duplicates, res.Violations, tt.dups, tt.viols, res.Err())
			}
			if (res.Err() == nil) != (tt.dups == 0 && tt.viols == 0) {
				t.Errorf("Err() = %v with %d duplicates and %d violations", res.Err(), tt.dups, tt.viols)
			}
			if tt.viols > 0 {
				v := res.FirstViols[0]
				if v.Op.Value != tt.wantOp || v.Before.Value != tt.wantBefore {
					t.Errorf("first violation: got %v, want op %d before %d", v, tt.wantOp, tt.wantBefore)
				}
				if !strings.Contains(res.Err().Error(), v.String()) {
					t.Errorf("Err() does not name the first violation:\n%v", res.Err())
				}
			}
		})
	}
}

func TestCheckCounts(t *testing.T) {
	ops := hist(op(0, 10, 11, 1), fail(1, 12, 13, "TRYAGAIN"), fail(1, 14, 15, "TRYAGAIN"),
		fail(2, 5, 30, "NET"), op(0, 12, 20, 2), op(1, 40, 41, 3))
	res := Check(ops)
	if res.Ops != 6 || res.OK != 3 || res.Errors["TRYAGAIN"] != 2 || res.Errors["NET"] != 1 {
		t.Errorf("got %d ops, %d OK, errors %v; want 6, 3, TRYAGAIN=2 NET=1", res.Ops, res.OK, res.Errors)
	}
	if res.Span != (Gap{5, 41}) {
		t.Errorf("span %v, want {5 41}", res.Span)
	}
	if res.LongestGap != (Gap{20, 41}) {
		t.Errorf("longest gap %v, want {20 41} (last ID at 20, next at 41)", res.LongestGap)
	}
	if g := LongestGap(ops, 0, 100); g != (Gap{41, 100}) {
		t.Errorf("LongestGap in [0,100]: %v, want {41 100} (after the last ID)", g)
	}
	if g := LongestGap(ops, -100, 20); g != (Gap{-100, 11}) {
		t.Errorf("LongestGap in [-100,20]: %v, want {-100 11} (before the first ID)", g)
	}
	if g := LongestGap(nil, 3, 9); g != (Gap{3, 9}) {
		t.Errorf("LongestGap with no ID: %v, want the whole window", g)
	}
	if !strings.Contains(res.String(), "TRYAGAIN=2") {
		t.Errorf("String() = %q, want the counts by code", res.String())
	}
}

func TestCheckExamplesBounded(t *testing.T) {
	var ops []Op
	for i := range 100 {
		ops = append(ops, op(i, int64(2*i), int64(2*i+1), int64(1000-i)))
	}
	res := Check(hist(ops...))
	if res.Violations != 99 || len(res.FirstViols) != Examples {
		t.Fatalf("got %d violations, %d kept; want 99, %d", res.Violations, len(res.FirstViols), Examples)
	}
	if res.FirstViols[0].Op.Value != 999 {
		t.Errorf("first violation %v, want the earliest sent (999)", res.FirstViols[0])
	}
}

// linearizable makes a history of a correct counter: each op takes effect at a random
// instant of [send, reply], values grow with those instants (with gaps, as segments leave),
// and a fraction of the ops fail.
func linearizable(rng *rand.Rand, clients, perClient int) []Op {
	type ev struct {
		at int64
		k  int
	}
	var ops []Op
	var evs []ev
	for c := range clients {
		now := rng.Int64N(50)
		for range perClient {
			send := now + rng.Int64N(5)
			reply := send + 1 + rng.Int64N(40)
			o := Op{Client: c, Send: send, Reply: reply, N: 1}
			if rng.IntN(20) == 0 {
				o.Err, o.N = "TRYAGAIN", 0
			} else if rng.IntN(4) == 0 {
				o.N = 1 + rng.Int64N(5)
			}
			evs = append(evs, ev{send + rng.Int64N(reply-send+1), len(ops)})
			ops = append(ops, o)
			now = reply
		}
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.k - b.k
	})
	next := int64(1)
	for _, e := range evs {
		o := &ops[e.k]
		if !o.OK() {
			continue
		}
		next += rng.Int64N(3) // gaps are allowed
		o.Value = next + o.N - 1
		next = o.Value + 1
	}
	return hist(ops...)
}

// reference is the definition, in O(n²): a violation is an op whose lowest ID is not above
// the value of a reply received strictly before it was sent, or of its client's earlier op;
// a duplicate is an op overlapping an op earlier in the list... counted as in Check: an op
// whose range starts at or below the highest ID of the ops with lower (Lo, index).
func reference(ops []Op) (dups, viols int) {
	for i, b := range ops {
		if !b.OK() {
			continue
		}
		for _, a := range ops {
			if a.OK() && a.Value >= b.Lo() && (a.Reply < b.Send || (a.Client == b.Client && a.Seq < b.Seq)) {
				viols++
				break
			}
		}
		for k, a := range ops {
			if k != i && a.OK() && (a.Lo() < b.Lo() || (a.Lo() == b.Lo() && k < i)) && a.Value >= b.Lo() {
				dups++
				break
			}
		}
	}
	return dups, viols
}

// TestCheckAgainstReference: correct histories pass, and histories broken at random (two
// replies' values swapped, a value lowered, a reply stamped later) get exactly the counts of
// the O(n²) definition.
func TestCheckAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 1))
	broken := 0
	for round := range 300 {
		ops := linearizable(rng, 1+rng.IntN(8), 1+rng.IntN(30))
		if res := Check(ops); res.Err() != nil {
			t.Fatalf("round %d: a linearizable history failed: %v", round, res.Err())
		}
		for range 1 + rng.IntN(3) {
			i, j := rng.IntN(len(ops)), rng.IntN(len(ops))
			switch rng.IntN(3) {
			case 0:
				ops[i].Value, ops[j].Value = ops[j].Value, ops[i].Value
				ops[i].N, ops[j].N = ops[j].N, ops[i].N
			case 1:
				ops[i].Value -= rng.Int64N(10)
			case 2:
				ops[i].Reply += rng.Int64N(30)
			}
		}
		res := Check(ops)
		dups, viols := reference(ops)
		if res.Duplicates != dups || res.Violations != viols {
			t.Fatalf("round %d: Check found %d duplicates and %d violations, the definition %d and %d\n%v",
				round, res.Duplicates, res.Violations, dups, viols, ops)
		}
		if viols > 0 {
			broken++
		}
	}
	if broken < 50 {
		t.Errorf("only %d of 300 broken histories had a violation: the test does not exercise the check", broken)
	}
}

// TestRecorder: clients of a linearizable counter (one atomic) pass; clients of two
// "instances" each handing out its own block (what ordinary tags do) fail, and the recorder
// keeps each client's ops in order with send <= reply.
func TestRecorder(t *testing.T) {
	run := func(next func(c int) int64) []Op {
		r := NewRecorder()
		var wg sync.WaitGroup
		for c := range 8 {
			cl := r.Client()
			wg.Go(func() {
				for k := range 2000 {
					cl.Send()
					if k%100 == 99 {
						cl.Fail("TRYAGAIN")
						continue
					}
					cl.OK(next(c), 1)
				}
			})
		}
		wg.Wait()
		return r.Ops()
	}
	var n atomic.Int64
	ops := run(func(int) int64 { return n.Add(1) })
	res := Check(ops)
	if res.Err() != nil || res.OK != 8*1980 || res.Errors["TRYAGAIN"] != 8*20 {
		t.Fatalf("atomic counter: %v\n%v", res, res.Err())
	}
	for i, o := range ops {
		if o.Send > o.Reply || (i > 0 && ops[i-1].Client == o.Client && (ops[i-1].Seq+1 != o.Seq || ops[i-1].Reply > o.Send)) {
			t.Fatalf("op %d: %v after %v: want each client's ops in order, send <= reply", i, o, ops[i-1])
		}
	}
	var blocks [2]atomic.Int64
	blocks[1].Store(1_000_000)
	res = Check(run(func(c int) int64 { return blocks[c%2].Add(1) }))
	if res.Violations == 0 || res.Duplicates != 0 {
		t.Fatalf("two blocks: got %d violations, %d duplicates; want violations and no duplicate", res.Violations, res.Duplicates)
	}
}

// TestCheckMillion checks a million ops of 50 clients (the size of a long end-to-end run;
// 200,000 under the race detector, which slows the sorts tenfold) and reports the time; the
// sweep is O(n log n).
func TestCheckMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("a million ops")
	}
	perClient := 20_000
	if raceOn {
		perClient = 4_000
	}
	ops := linearizable(rand.New(rand.NewPCG(1, 2)), 50, perClient)
	t0 := time.Now()
	res := Check(ops)
	took := time.Since(t0)
	if res.Err() != nil || res.Ops != 50*perClient {
		t.Fatalf("%v\n%v", res, res.Err())
	}
	t.Logf("checked %d ops in %v", res.Ops, took)
	// One early ID handed out again late: a duplicate and a violation.
	early := slices.IndexFunc(ops, func(o Op) bool { return o.OK() && o.N == 1 })
	late := early + len(ops)/2 + slices.IndexFunc(ops[early+len(ops)/2:], func(o Op) bool { return o.OK() && o.N == 1 })
	ops[late].Value = ops[early].Value
	if res := Check(ops); res.Duplicates != 1 || res.Violations < 1 {
		t.Fatalf("one value reused: got %d duplicates, %d violations; want 1 and at least 1", res.Duplicates, res.Violations)
	}
}

func BenchmarkCheck(b *testing.B) {
	ops := linearizable(rand.New(rand.NewPCG(1, 2)), 50, 20_000)
	b.ResetTimer()
	for b.Loop() {
		if res := Check(ops); res.Err() != nil {
			b.Fatal(res.Err())
		}
	}
}

// TestOKEach: the IDs of one IDS.SEGMENT reply are ops of their client in the reply's
// order, so a reply not increasing within itself is a violation, and so is one below an
// earlier reply.
func TestOKEach(t *testing.T) {
	r := NewRecorder()
	a, b := r.Client(), r.Client()
	a.Send()
	a.OKEach([]int64{1, 2, 5})
	b.Send()
	b.OKEach([]int64{6, 9})
	if res := Check(r.Ops()); res.Err() != nil || res.OK != 5 {
		t.Fatalf("increasing replies: %v\n%v", res, res.Err())
	}
	a.Send()
	a.OKEach([]int64{12, 11})
	b.Send()
	b.OKEach([]int64{10})
	res := Check(r.Ops())
	if res.Violations != 2 || res.Duplicates != 0 {
		t.Fatalf("got %d violations, %d duplicates; want 2 (11 after 12 in one reply, 10 after 12) and 0\n%v", res.Violations, res.Duplicates, res.Err())
	}
}
