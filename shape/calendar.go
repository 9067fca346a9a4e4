package shape

import (
	"fmt"
	"strings"
	"time"
)

// The calendar of periodic tags. A period is a local label — the date (RESET day), the date
// and hour (RESET hour), the month or the year in the tag's zone — and lasts exactly as long
// as the zone's clocks show that label: it starts at the first instant the label is shown
// and ends at the first instant another one is. So the day of a zone whose midnight does not
// exist (America/Santiago, America/Havana, Atlantic/Azores on their spring-forward day)
// starts when the clocks jump, the hour shown twice at a fall-back is one period of two hours,
// and Australia/Lord_Howe's 30-minute shift gives a 30-minute and a 90-minute hour.
//
// Bounds are found from the zone's transitions (Time.ZoneBounds): within one zone period the
// wall clock is the instant plus a constant offset, so a label's instants there form one
// interval; at a transition the label either changes (the bound) or carries on into the
// neighbouring zone period (a repeated hour), which is then examined the same way. A label
// that the clocks show twice with another label between (a fall-back of two hours, as in
// Antarctica/Troll) is two periods of one key: they share the row, whose counter carries on.

// label is a period's local label: the wall-clock fields that name it (finer ones zero).
type label struct{ y, m, d, h int }

func (s *Shape) labelOf(t time.Time) label {
	t = t.In(s.loc)
	y, m, d := t.Date()
	switch s.reset {
	case ResetHour:
		return label{y, int(m), d, t.Hour()}
	case ResetDay:
		return label{y, int(m), d, 0}
	case ResetMonth:
		return label{y, int(m), 1, 0}
	case ResetYear:
		return label{y, 1, 1, 0}
	}
	return label{}
}

// wall is the label's first wall-clock reading, and next the first reading of the label after
// it, both as UTC instants of the same reading (wall-clock arithmetic).
func (s *Shape) wall(l label) (first, next time.Time) {
	first = time.Date(l.y, time.Month(l.m), l.d, l.h, 0, 0, 0, time.UTC)
	switch s.reset {
	case ResetHour:
		next = first.Add(time.Hour)
	case ResetDay:
		next = first.AddDate(0, 0, 1)
	case ResetMonth:
		next = first.AddDate(0, 1, 0)
	case ResetYear:
		next = first.AddDate(1, 0, 0)
	}
	return first, next
}

// maxZoneSteps bounds the walk across zone transitions (a year has a handful).
const maxZoneSteps = 64

// bounds returns the period of the label shown at t: [start, end).
func (s *Shape) bounds(t time.Time) (start, end time.Time) {
	l := s.labelOf(t)
	first, next := s.wall(l)
	// start: back through the zone periods while the label is shown at their start.
	cur := t
	for range maxZoneSteps {
		zs, _ := cur.In(s.loc).ZoneBounds()
		_, off := cur.In(s.loc).Zone()
		a := first.Add(-time.Duration(off) * time.Second)
		if zs.IsZero() || a.After(zs) {
			start = a
			break
		}
		if prev := zs.Add(-time.Nanosecond); s.labelOf(prev) == l {
			cur = prev
			continue
		}
		start = zs
		break
	}
	// end: forward while the label is still shown at the next zone period's start.
	cur = t
	for range maxZoneSteps {
		_, ze := cur.In(s.loc).ZoneBounds()
		_, off := cur.In(s.loc).Zone()
		b := next.Add(-time.Duration(off) * time.Second)
		if ze.IsZero() || b.Before(ze) {
			end = b
			break
		}
		if s.labelOf(ze) == l {
			cur = ze
			continue
		}
		end = ze
		break
	}
	return start.In(s.loc), end.In(s.loc)
}

// periodOfLabel returns the period the clocks name l, or nil when they never show it (an hour
// skipped by a spring-forward, 30 February).
func (s *Shape) periodOfLabel(l label) *Period {
	// time.Date picks some instant for a reading that does not exist, or one of two for a
	// reading shown twice; the label is then shown at it or, for a skipped reading, at the
	// transition next to it (before or after, depending on the offset time.Date chose).
	t := time.Date(l.y, time.Month(l.m), l.d, l.h, 0, 0, 0, s.loc)
	if s.labelOf(t) != l {
		zs, ze := t.ZoneBounds()
		switch {
		case !zs.IsZero() && s.labelOf(zs) == l:
			t = zs
		case !ze.IsZero() && s.labelOf(ze) == l:
			t = ze
		default:
			return nil
		}
	}
	return s.periodAround(t)
}

// periodAround builds the period whose label is shown at t.
func (s *Shape) periodAround(t time.Time) *Period {
	start, end := s.bounds(t)
	return s.period(start, end)
}

// CheckZone checks a TZ option: an IANA zone name ("" is UTC). Local is refused: the server's
// own zone differs between hosts, and two instances would print different dates at one instant.
func CheckZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if strings.EqualFold(name, "local") {
		return nil, fmt.Errorf("TZ %q: the server's local zone differs between hosts; name an IANA zone (Europe/Paris, Asia/Shanghai, UTC)", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil || loc.String() != name {
		return nil, fmt.Errorf("TZ %q: unknown time zone (an IANA name such as Europe/Paris, Asia/Shanghai, UTC)", name)
	}
	return loc, nil
}

// labelOfFields is the label of the period named by parsed date fields.
func (s *Shape) labelOfFields(y, m, d, h int) label {
	switch s.reset {
	case ResetHour:
		return label{y, m, d, h}
	case ResetDay:
		return label{y, m, d, 0}
	case ResetMonth:
		return label{y, m, 1, 0}
	}
	return label{y, 1, 1, 0}
}
