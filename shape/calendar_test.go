package shape

import (
	"archive/zip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func zoneShape(t testing.TB, reset, zone string) *Shape {
	t.Helper()
	format := map[string]string{"hour": "{yyyyMMddHH}{seq:6}", "day": "{yyyyMMdd}{seq:6}", "month": "{yyyyMM}{seq:6}", "year": "{yyyy}{seq:6}"}[reset]
	s, err := Compile("t", Spec{Format: format, Reset: reset, TZ: zone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func local(t *testing.T, zone string, y int, m time.Month, d, h, min int) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return time.Date(y, m, d, h, min, 0, 0, loc)
}

// TestDSTDayWithoutMidnight: in the three zones whose midnight does not exist on their
// spring-forward day, that day's period starts when the clocks jump (01:00 local), carries
// that day's date, and the day before ends exactly there.
func TestDSTDayWithoutMidnight(t *testing.T) {
	for _, tc := range []struct {
		zone string
		day  time.Time // noon UTC of the day
		key  string
	}{
		{"America/Santiago", time.Date(2026, 9, 6, 16, 0, 0, 0, time.UTC), "20260906"},
		{"America/Havana", time.Date(2026, 3, 8, 16, 0, 0, 0, time.UTC), "20260308"},
		{"Atlantic/Azores", time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC), "20260329"},
	} {
		t.Run(tc.zone, func(t *testing.T) {
			s := zoneShape(t, "day", tc.zone)
			p := s.PeriodAt(tc.day)
			if p.Key != tc.key {
				t.Fatalf("period %s, want %s", p.Key, tc.key)
			}
			if h, m := p.Start.Hour(), p.Start.Minute(); h != 1 || m != 0 || p.Start.Format("20060102") != tc.key {
				t.Fatalf("day starts at %v, want 01:00 local of %s (the jump)", p.Start, tc.key)
			}
			if got := p.End.Sub(p.Start); got != 23*time.Hour {
				t.Fatalf("day lasts %v, want 23h", got)
			}
			before := s.PeriodAt(p.Start.Add(-time.Nanosecond))
			if before.Key == p.Key || !before.End.Equal(p.Start) {
				t.Fatalf("day before: %s ends %v; want another key ending at %v", before.Key, before.End, p.Start)
			}
			got, err := s.Append(nil, p, 1)
			if err != nil || string(got) != tc.key+"000001" {
				t.Fatalf("first ID %q, %v; want %s000001", got, err, tc.key)
			}
			back, err := s.Parse(string(got))
			if err != nil || back.Period.Key != tc.key || !back.Period.Start.Equal(p.Start) {
				t.Fatalf("parse: %+v, %v", back, err)
			}
		})
	}
}

// TestLordHoweHalfHour: Australia/Lord_Howe shifts by 30 minutes at 02:00; RESET hour gives
// a 30-minute hour 02 (spring forward) and a 90-minute hour 01 (fall back), each one period.
func TestLordHoweHalfHour(t *testing.T) {
	s := zoneShape(t, "hour", "Australia/Lord_Howe")
	// 4 October 2026: 02:00 +10:30 becomes 02:30 +11.
	jump := time.Date(2026, 10, 3, 15, 30, 0, 0, time.UTC)
	p := s.PeriodAt(jump)
	if p.Key != "2026100402" || !p.Start.Equal(jump) || p.End.Sub(p.Start) != 30*time.Minute {
		t.Fatalf("spring forward: %s [%v, %v), want 2026100402 of 30 minutes from %v", p.Key, p.Start, p.End, jump)
	}
	if prev := s.PeriodAt(jump.Add(-time.Nanosecond)); prev.Key != "2026100401" || !prev.End.Equal(jump) {
		t.Fatalf("hour before the jump: %s ends %v", prev.Key, prev.End)
	}
	// 5 April 2026: 02:00 +11 becomes 01:30 +10:30; hour 01 is shown for 90 minutes.
	p = s.PeriodAt(time.Date(2026, 4, 4, 14, 45, 0, 0, time.UTC)) // 01:45 +11, first time
	if p.Key != "2026040501" || p.End.Sub(p.Start) != 90*time.Minute {
		t.Fatalf("fall back: %s [%v, %v), want 2026040501 of 90 minutes", p.Key, p.Start, p.End)
	}
	if q := s.PeriodAt(time.Date(2026, 4, 4, 15, 15, 0, 0, time.UTC)); q != p { // 01:45 +10:30, second time
		t.Fatalf("the repeated half hour is another period: %s", q.Key)
	}
}

// TestRepeatedHourOnePeriod: New York's 1 November 2026 shows 01:00-02:00 twice; RESET hour
// makes it one period of two hours, served from PeriodAt's cache throughout (the same
// *Period, no recomputation per request).
func TestRepeatedHourOnePeriod(t *testing.T) {
	s := zoneShape(t, "hour", "America/New_York")
	first := local(t, "America/New_York", 2026, 11, 1, 1, 0) // 01:00 EDT (time.Date picks the first)
	p := s.PeriodAt(first)
	if p.Key != "2026110101" || p.End.Sub(p.Start) != 2*time.Hour {
		t.Fatalf("repeated hour: %s [%v, %v), want 2026110101 of 2h", p.Key, p.Start, p.End)
	}
	for d := time.Duration(0); d < 2*time.Hour; d += 7 * time.Minute {
		if q := s.PeriodAt(first.Add(d)); q != p {
			t.Fatalf("at +%v: another period %s", d, q.Key)
		}
	}
	if q := s.PeriodAt(first.Add(2 * time.Hour)); q.Key != "2026110102" {
		t.Fatalf("after the repeated hour: %s", q.Key)
	}
	// A skipped hour does not parse (8 March 2026: 02:00 EST becomes 03:00 EDT).
	if _, err := s.Parse("2026030802000001"); err == nil {
		t.Fatal("parse of the skipped hour 02 succeeded")
	}
}

// TestZoneNames: only IANA names; Local refused; "" and UTC are UTC.
func TestZoneNames(t *testing.T) {
	for _, z := range []string{"Local", "local", "LOCAL", "Nowhere/City", "/etc/localtime", "../zoneinfo/UTC", "utc"} {
		if _, err := Compile("t", Spec{Format: "{yyyyMMdd}{seq:6}", Reset: "day", TZ: z}, nil); err == nil {
			t.Errorf("TZ %q accepted", z)
		}
	}
	for _, z := range []string{"", "UTC", "Etc/UTC", "Europe/Paris", "America/Santiago"} {
		if _, err := Compile("t", Spec{Format: "{yyyyMMdd}{seq:6}", Reset: "day", TZ: z}, nil); err != nil {
			t.Errorf("TZ %q refused: %v", z, err)
		}
	}
}

// allZones lists the zones of Go's tzdata (GOROOT/lib/time/zoneinfo.zip), one name per
// distinct zone data.
func allZones(t *testing.T) []string {
	t.Helper()
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	if r, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(root)), "lib", "time", "zoneinfo.zip")); err == nil {
		defer r.Close()
		// A link (US/Eastern, America/New_York) has the same data: checked once.
		type data struct {
			crc  uint32
			size uint64
		}
		seen := map[data]bool{}
		var out []string
		for _, f := range r.File {
			d := data{f.CRC32, f.UncompressedSize64}
			if !strings.HasSuffix(f.Name, "/") && !seen[d] {
				seen[d] = true
				out = append(out, f.Name)
			}
		}
		return out
	}
	t.Skip("no zoneinfo.zip in GOROOT")
	return nil
}

// TestAllZonesCalendar checks every zone of tzdata from 2026 to 2035: for RESET month and
// year every period in turn, and for RESET day and hour the periods around each of the zone's
// transitions (between two transitions the wall clock is the instant plus a constant offset,
// so periods there are the plain ones). Each period is non-empty, starts where the one before
// ended (no overlap, no hole), shows its own key at its first and last instant and not just
// before, and its first ID parses back to it.
func TestAllZonesCalendar(t *testing.T) {
	from, to := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	zones := allZones(t)
	if len(zones) < 250 {
		t.Fatalf("%d zones", len(zones))
	}
	started := time.Now()
	periods, transitions := 0, 0
	for _, zone := range zones {
		if _, err := CheckZone(zone); err != nil {
			t.Errorf("zone %s refused: %v", zone, err)
			continue
		}
		for _, reset := range []string{"month", "year"} {
			periods += walkPeriods(t, zoneShape(t, reset, zone), from, to)
		}
		day, hour := zoneShape(t, "day", zone), zoneShape(t, "hour", zone)
		for at := from; ; {
			_, next := at.In(day.loc).ZoneBounds()
			if next.IsZero() || !next.Before(to) {
				break
			}
			transitions++
			periods += walkPeriods(t, day, next.Add(-26*time.Hour), next.Add(26*time.Hour))
			periods += walkPeriods(t, hour, next.Add(-3*time.Hour), next.Add(3*time.Hour))
			at = next
		}
		if t.Failed() {
			t.Fatalf("zone %s", zone)
		}
	}
	t.Logf("%d zones, %d transitions, %d periods in %v", len(zones), transitions, periods, time.Since(started))
}

func walkPeriods(t *testing.T, s *Shape, from, to time.Time) int {
	t.Helper()
	p := s.periodAround(from)
	n := 0
	for p.Start.Before(to) {
		n++
		if !p.Start.Before(p.End) {
			t.Fatalf("%s: empty period %s [%v, %v)", s.loc, p.Key, p.Start, p.End)
		}
		for _, at := range []time.Time{p.Start, p.End.Add(-time.Nanosecond)} {
			if k := s.periodAround(at).Key; k != p.Key {
				t.Fatalf("%s: %v is in period %s, shows %s", s.loc, at, p.Key, k)
			}
		}
		if k := s.periodAround(p.Start.Add(-time.Nanosecond)).Key; k == p.Key {
			t.Fatalf("%s: period %s starts at %v, but the instant before shows the same key", s.loc, p.Key, p.Start)
		}
		id, err := s.Append(nil, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		back, err := s.Parse(string(id))
		if err != nil || back.Period.Key != p.Key {
			t.Fatalf("%s: %s parses to %+v, %v", s.loc, id, back.Period, err)
		}
		q := s.NextPeriod(p)
		if !q.Start.Equal(p.End) {
			t.Fatalf("%s: period %s ends %v, the next %s starts %v", s.loc, p.Key, p.End, q.Key, q.Start)
		}
		p = q
	}
	return n
}
