package shape

import (
	"errors"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

var testKey = []byte{0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c}

func mustCompile(t testing.TB, tag string, spec Spec, key []byte) *Shape {
	t.Helper()
	s, err := Compile(tag, spec, key)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", spec, err)
	}
	return s
}

func TestCompileRefusals(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		key  []byte
		want error
		text string
	}{
		{"no counter", Spec{Format: "ORD{yyyyMMdd}", Reset: "day"}, nil, ErrTemplate, "no counter"},
		{"two counters", Spec{Format: "{seq:3}{seq:3}"}, nil, ErrTemplate, "more than one"},
		{"unknown counter", Spec{Format: "{seq16:3}"}, nil, ErrTemplate, "unknown counter"},
		{"width 0", Spec{Format: "{seq:0}"}, nil, ErrTemplate, "width"},
		{"decimal too wide for int64", Spec{Format: "{seq:19}"}, nil, ErrTemplate, "width"},
		{"radix 62 too wide", Spec{Format: "{seq62:11}"}, nil, ErrTemplate, "width"},
		{"unclosed", Spec{Format: "A{seq:3"}, nil, ErrTemplate, "not closed"},
		{"stray close", Spec{Format: "A}{seq:3}"}, nil, ErrTemplate, "without"},
		{"space", Spec{Format: "A {seq:3}"}, nil, ErrTemplate, "printable"},
		{"bad letters", Spec{Format: "{yyy}{seq:3}", Reset: "year"}, nil, ErrTemplate, "date field"},
		{"date without reset", Spec{Format: "{yyyyMMdd}{seq:3}"}, nil, ErrTemplate, "need RESET"},
		{"day reset without day", Spec{Format: "{yyyyMM}{seq:6}", Reset: "day"}, nil, ErrTemplate, "print the day"},
		{"month reset without year", Spec{Format: "{MM}{seq:6}", Reset: "month"}, nil, ErrTemplate, "print the month"},
		{"reset without format", Spec{Reset: "day", Opaque: true}, testKey, ErrTemplate, "print the day"},
		{"field finer than the period", Spec{Format: "{yyyyMMddHH}{seq:6}", Reset: "day"}, nil, ErrTemplate, "finer"},
		{"tz without reset", Spec{Format: "{seq:6}", TZ: "Asia/Shanghai"}, nil, ErrTemplate, "TZ needs RESET"},
		{"unknown tz", Spec{Format: "{yyyyMMdd}{seq:6}", Reset: "day", TZ: "Mars/Olympus"}, nil, ErrTemplate, "unknown time zone"},
		{"bad reset", Spec{Format: "{yyyyMMdd}{seq:6}", Reset: "week"}, nil, ErrTemplate, "RESET"},
		{"start past the width", Spec{Format: "{seq:3}", Start: 1000}, nil, ErrTemplate, "START 1000"},
		{"nothing", Spec{}, nil, ErrTemplate, "FORMAT or OPAQUE"},
		{"opaque without key", Spec{Format: "{seq:8}", Opaque: true}, nil, ErrKey, "no --id-key-file"},
		{"opaque under another key", Spec{Format: "{seq:8}", Opaque: true, KeyCheck: "0011223344556677"}, testKey, ErrKey, "another id key"},
		{"opaque domain too small", Spec{Format: "{seq:5}", Opaque: true}, testKey, ErrTemplate, "1,000,000"},
		{"too long", Spec{Format: strings.Repeat("A", 92) + "{seq:18}"}, nil, ErrTemplate, "renders"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile("order", tc.spec, tc.key)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want %v containing %q", err, tc.want, tc.text)
			}
		})
	}
}

func TestRender(t *testing.T) {
	at := time.Date(2026, 12, 1, 15, 24, 15, 0, time.UTC) // 23:24 in Shanghai
	tests := []struct {
		name string
		spec Spec
		c    int64
		want string
		row  string
	}{
		{"daily order, Shanghai", Spec{Format: "ORD{yyyyMMdd}{seq:6}", Reset: "day", TZ: "Asia/Shanghai"}, 1, "ORD20261201000001", "order@20261201"},
		{"daily, New York is still the 1st", Spec{Format: "ORD{yyyyMMdd}{seq:6}", Reset: "day", TZ: "America/New_York"}, 42, "ORD20261201000042", "order@20261201"},
		{"monthly yy", Spec{Format: "INV-{yyMM}-{seq:4}", Reset: "month"}, 7, "INV-2612-0007", "order@202612"},
		{"separators inside braces", Spec{Format: "{yyyy-MM-dd}/{seq:3}", Reset: "day"}, 999, "2026-12-01/999", "order@20261201"},
		{"hourly", Spec{Format: "H{yyyyMMddHH}{seq:5}", Reset: "hour"}, 3, "H202612011500003", "order@2026120115"},
		{"yearly", Spec{Format: "{yyyy}{seq:8}", Reset: "year"}, 12345678, "202612345678", "order@2026"},
		{"radix 62", Spec{Format: "u{seq62:6}"}, 62*62 + 1, "u000101", "order@"},
		{"radix 36", Spec{Format: "{seq36:4}x"}, 36*36*36*35 + 35, "z00zx", "order@"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustCompile(t, "order", tc.spec, nil)
			p := s.PeriodAt(at)
			got, err := s.Append(nil, p, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want || p.Row != tc.row {
				t.Fatalf("got %s (row %s), want %s (row %s)", got, p.Row, tc.want, tc.row)
			}
			back, err := s.Parse(string(got))
			if err != nil || back.Counter != tc.c || back.Period.Key != p.Key {
				t.Fatalf("Parse(%s) = %+v, %v; want counter %d period %q", got, back, err, tc.c, p.Key)
			}
		})
	}
}

// A daily tag in Shanghai: 15:59:59.999 UTC is the 1st, 16:00 UTC the 2nd.
func TestPeriodBoundaryInZone(t *testing.T) {
	s := mustCompile(t, "order", Spec{Format: "ORD{yyyyMMdd}{seq:6}", Reset: "day", TZ: "Asia/Shanghai"}, nil)
	before := time.Date(2026, 12, 1, 15, 59, 59, 999e6, time.UTC)
	p1 := s.PeriodAt(before)
	p2 := s.PeriodAt(before.Add(time.Millisecond))
	if p1.Key != "20261201" || p2.Key != "20261202" {
		t.Fatalf("periods %s, %s; want 20261201, 20261202", p1.Key, p2.Key)
	}
	if !p1.End.Equal(p2.Start) || !p2.Start.Equal(before.Add(time.Millisecond)) {
		t.Fatalf("period 1 ends %v, period 2 starts %v", p1.End, p2.Start)
	}
	// A clock stepping back into the 1st gets the 1st's period (its own row) again.
	if p := s.PeriodAt(before); p.Key != "20261201" {
		t.Fatalf("after a step back: period %s, want 20261201", p.Key)
	}
}

// DST: New York's 8 March 2026 is 23 hours long; the day period still ends at the next midnight.
func TestPeriodAcrossDST(t *testing.T) {
	s := mustCompile(t, "o", Spec{Format: "{yyyyMMdd}{seq:6}", Reset: "day", TZ: "America/New_York"}, nil)
	p := s.PeriodAt(time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC))
	if got := p.End.Sub(p.Start); got != 23*time.Hour {
		t.Fatalf("8 March 2026 in New York lasts %v, want 23h", got)
	}
}

func TestLimit(t *testing.T) {
	s := mustCompile(t, "order", Spec{Format: "A{seq:3}"}, nil)
	p := s.PeriodAt(time.Now())
	if got, err := s.Append(nil, p, 999); err != nil || string(got) != "A999" {
		t.Fatalf("999: got %s, %v", got, err)
	}
	for _, c := range []int64{1000, 0, -1} {
		if got, err := s.Append(nil, p, c); !errors.Is(err, ErrLimit) || len(got) != 0 {
			t.Fatalf("counter %d: got %q, %v; want ErrLimit and nothing rendered", c, got, err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	s := mustCompile(t, "order", Spec{Format: "ORD{yyyyMMdd}{seq:6}", Reset: "day", Start: 10}, nil)
	for _, id := range []string{
		"ORD20261201000009",  // below START
		"ORD20261301000010",  // month 13
		"ORD20260230000010",  // 30 February
		"ORX20261201000010",  // literal
		"ORD2026120100001",   // short
		"ORD202612010000100", // long
		"ORD2026120100001a",  // numeral
		"ORD2026-201000010",  // date digit
	} {
		if _, err := s.Parse(id); !errors.Is(err, ErrParse) {
			t.Errorf("Parse(%q): got %v, want ErrParse", id, err)
		}
	}
	o := mustCompile(t, "o", Spec{Opaque: true}, testKey)
	for _, id := range []string{"0", "-5", "1000000000000000000", "0012", "abc"} {
		if _, err := o.Parse(id); !errors.Is(err, ErrParse) {
			t.Errorf("opaque Parse(%q): got %v, want ErrParse", id, err)
		}
	}
}

// String order is numeric order for every radix: fixed width, numerals in ASCII order.
func TestStringOrderIsNumericOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, f := range []string{"{seq:8}", "{seq36:6}", "{seq62:5}"} {
		s := mustCompile(t, "t", Spec{Format: f}, nil)
		p := s.PeriodAt(time.Time{})
		cs := make([]int64, 2000)
		for i := range cs {
			cs[i] = 1 + r.Int64N(s.Capacity())
		}
		strs := make([]string, len(cs))
		for i, c := range cs {
			b, err := s.Append(nil, p, c)
			if err != nil {
				t.Fatal(err)
			}
			strs[i] = string(b)
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
		sort.Strings(strs)
		for i := range cs {
			if got, _ := s.Parse(strs[i]); got.Counter != cs[i] {
				t.Fatalf("%s: the %d-th string %s is counter %d, the %d-th counter is %d", f, i, strs[i], got.Counter, i, cs[i])
			}
		}
	}
}

// Opaque: a bijection of the counters (no two counters give one ID), never 0, reversible,
// different per period (the period is in the tweak) and per key.
func TestOpaque(t *testing.T) {
	s := mustCompile(t, "order", Spec{Format: "ORD{yyyyMMdd}{seq:6}", Reset: "day", Opaque: true}, testKey)
	if s.Spec().KeyCheck == "" {
		t.Fatal("no key check recorded")
	}
	p := s.PeriodAt(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	seen := make(map[string]int64, 999999)
	for c := int64(1); c <= 999999; c++ {
		b, err := s.Append(nil, p, c)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(string(b), "000000") {
			t.Fatalf("counter %d renders the value 0", c)
		}
		if prev, dup := seen[string(b)]; dup {
			t.Fatalf("counters %d and %d both give %s", prev, c, b)
		}
		seen[string(b)] = c
		if c%1009 == 0 {
			if got, err := s.Parse(string(b)); err != nil || got.Counter != c {
				t.Fatalf("Parse(%s) = %+v, %v; want %d", b, got, err, c)
			}
		}
	}
	if _, err := s.Append(nil, p, 1_000_000); !errors.Is(err, ErrLimit) {
		t.Fatalf("counter 10^6 of {seq:6}: got %v, want ErrLimit", err)
	}
	// The same counter on another day, or under another key, gives another ID.
	a, _ := s.Append(nil, p, 1)
	b, _ := s.Append(nil, s.PeriodAt(p.End), 1)
	k2 := append([]byte(nil), testKey...)
	k2[0] ^= 1
	s2 := mustCompile(t, "order", Spec{Format: "ORD{yyyyMMdd}{seq:6}", Reset: "day", Opaque: true}, k2)
	c, _ := s2.Append(nil, p, 1)
	if string(a[11:]) == string(b[11:]) || string(a) == string(c) {
		t.Fatalf("counter 1: %s (1st), %s (2nd), %s (other key): want all different", a, b, c)
	}
	// An opaque integer tag: positive, below 10^18, round trip.
	o := mustCompile(t, "o", Spec{Opaque: true}, testKey)
	po := o.PeriodAt(time.Time{})
	for c := int64(1); c < 2000; c++ {
		v, err := o.Int(po, c)
		if err != nil || v <= 0 || v >= 1e18 {
			t.Fatalf("Int(%d) = %d, %v", c, v, err)
		}
		b, _ := o.Append(nil, po, c)
		if got, err := o.Parse(string(b)); err != nil || got.Counter != c {
			t.Fatalf("Parse(%s) = %+v, %v", b, got, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	k, err := ParseKey([]byte("  2B7E151628AED2A6ABF7158809CF4F3C\n"))
	if err != nil || len(k) != 16 || k[0] != 0x2b {
		t.Fatalf("got %x, %v", k, err)
	}
	if k, err := ParseKey([]byte(strings.Repeat("ab", 32))); err != nil || len(k) != 32 {
		t.Fatalf("64 digits: got %d bytes, %v", len(k), err)
	}
	for _, bad := range []string{"", "2B7E", strings.Repeat("zz", 16), strings.Repeat("ab", 24)} {
		_, err := ParseKey([]byte(bad))
		if err == nil || (bad != "" && strings.Contains(err.Error(), bad)) {
			t.Errorf("ParseKey(%q): got %v; want an error that does not quote the content", bad, err)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	in := Spec{Format: "A{seq:6}", Reset: "", Opaque: true, KeyCheck: "00ff", Start: 5}
	out, err := DecodeSpec(in.Encode())
	if err != nil || out != in {
		t.Fatalf("got %+v, %v; want %+v", out, err, in)
	}
}

func TestAppendAllocatesNothing(t *testing.T) {
	for _, spec := range []Spec{
		{Format: "ORD{yyyyMMdd}{seq:6}", Reset: "day", TZ: "Asia/Shanghai"},
		{Format: "ORD{yyyyMMdd}{seq:12}", Reset: "day", Opaque: true},
	} {
		s := mustCompile(t, "order", spec, testKey)
		now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
		buf := make([]byte, 0, 64)
		s.Append(buf, s.PeriodAt(now), 1)
		c := int64(0)
		if a := testing.AllocsPerRun(1000, func() {
			c++
			buf, _ = s.Append(buf[:0], s.PeriodAt(now), c)
		}); a != 0 {
			t.Fatalf("%s: %.1f allocations per ID, want 0", spec.Format, a)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"daily", Spec{Format: "ORD{yyyyMMdd}{seq:6}", Reset: "day", TZ: "Asia/Shanghai"}},
		{"opaque12", Spec{Format: "ORD{yyyyMMdd}{seq:12}", Reset: "day", Opaque: true}},
		{"opaque-int", Spec{Opaque: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := mustCompile(b, "order", tc.spec, testKey)
			now := time.Now()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 0, 64)
				c := int64(0)
				for pb.Next() {
					c++
					buf, _ = s.Append(buf[:0], s.PeriodAt(now), c%900000+1)
				}
			})
		})
	}
}

// TestYYCenturies: {yy} prints the years 2000-2099 and parses as them; a period in another
// century (a clock a century off) renders nothing (ErrLimit), so two clocks a century apart
// can never print the same string. {yyyy} renders any year.
func TestYYCenturies(t *testing.T) {
	s := mustCompile(t, "o", Spec{Format: "O{yyMMdd}{seq:6}", Reset: "day"}, nil)
	for _, tc := range []struct {
		year int
		want string // "" : ErrLimit
	}{{1999, ""}, {2000, "O000101000001"}, {2026, "O260101000001"}, {2099, "O990101000001"}, {2100, ""}, {2126, ""}} {
		p := s.PeriodAt(time.Date(tc.year, 1, 1, 12, 0, 0, 0, time.UTC))
		got, err := s.Append(nil, p, 1)
		if tc.want == "" {
			if !errors.Is(err, ErrLimit) || len(got) != 0 {
				t.Errorf("%d: got %q, %v; want ErrLimit and nothing rendered", tc.year, got, err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%d: got %q, %v; want %s", tc.year, got, err, tc.want)
			continue
		}
		if ps, err := s.Parse(string(got)); err != nil || ps.Period.Start.Year() != tc.year {
			t.Errorf("parse %s: %+v, %v; want the year %d", got, ps, err, tc.year)
		}
	}
	full := mustCompile(t, "f", Spec{Format: "F{yyyyMMdd}{seq:6}", Reset: "day"}, nil)
	if got, err := full.Append(nil, full.PeriodAt(time.Date(2126, 1, 1, 0, 0, 0, 0, time.UTC)), 1); err != nil || string(got) != "F21260101000001" {
		t.Errorf("yyyy in 2126: %q, %v", got, err)
	}
}
