package shape

import (
	"crypto/aes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leafd/leafd/internal/ff1"
)

// Reset is the period after which a periodic tag's counter starts again.
type Reset uint8

// Resets.
const (
	ResetNone Reset = iota
	ResetHour
	ResetDay
	ResetMonth
	ResetYear
)

var resetNames = [...]string{ResetNone: "", ResetHour: "hour", ResetDay: "day", ResetMonth: "month", ResetYear: "year"}

func (r Reset) String() string { return resetNames[r] }

// ParseReset reads "hour", "day", "month" or "year" (any case); "" and "none" are ResetNone.
func ParseReset(s string) (Reset, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return ResetNone, nil
	case "hour":
		return ResetHour, nil
	case "day":
		return ResetDay, nil
	case "month":
		return ResetMonth, nil
	case "year":
		return ResetYear, nil
	}
	return 0, fmt.Errorf("%w: RESET %q: use day, month, year or hour", ErrTemplate, s)
}

// OpaqueWidth is the number of decimal digits of the domain of an opaque tag without a
// template: its IDs are in [1, 10^18), positive int64 values never 0.
const OpaqueWidth = 18

// Spec is a tag's shape as stored with the tag (JSON in leafd_tag_shape / the bolt bucket).
type Spec struct {
	Format string `json:"format,omitempty"`
	Reset  string `json:"reset,omitempty"`
	TZ     string `json:"tz,omitempty"`
	Opaque bool   `json:"opaque,omitempty"`
	// KeyCheck identifies the key of an opaque tag (hex of 8 bytes of AES_K(0^16), the
	// customary key check value); an instance with another key refuses the tag.
	KeyCheck string `json:"key_check,omitempty"`
	// Start is the first counter of every period (default 1); Step the step of its rows.
	Start int64  `json:"start,omitempty"`
	Step  int64  `json:"step,omitempty"`
	Desc  string `json:"desc,omitempty"`
}

// Encode returns the stored form.
func (s Spec) Encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// DecodeSpec reads the stored form.
func DecodeSpec(b []byte) (Spec, error) {
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, fmt.Errorf("%w: stored shape: %v", ErrTemplate, err)
	}
	return s, nil
}

// KeyCheck returns the key check value of an AES key ("" for no key).
func KeyCheck(key []byte) string {
	if len(key) == 0 {
		return ""
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return ""
	}
	var out [16]byte
	b.Encrypt(out[:], out[:])
	return hex.EncodeToString(out[:8])
}

// ParseKey reads an --id-key-file's content: the AES key as 32 or 64 hex digits (AES-128 or
// AES-256), surrounding whitespace ignored. The error never quotes the content.
func ParseKey(content []byte) ([]byte, error) {
	s := strings.TrimSpace(string(content))
	if len(s) != 32 && len(s) != 64 {
		return nil, fmt.Errorf("id key: want 32 or 64 hex digits, got %d characters", len(s))
	}
	k, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("id key: not hexadecimal")
	}
	return k, nil
}

// Shape is a compiled Spec of one tag. Safe for concurrent use.
type Shape struct {
	tag   string
	spec  Spec
	tmpl  *Template // nil: no template (an opaque integer tag)
	reset Reset
	loc   *time.Location
	ff    *ff1.Cipher
	radix int
	width int // counter width in numerals (template's, or OpaqueWidth)
	cap   int64
	start int64
	cur   atomic.Pointer[Period]
}

// Compile checks spec for tag and compiles it. key is the --id-key-file key (nil when none);
// an opaque spec needs it, and needs it to match spec.KeyCheck when that is set.
func Compile(tag string, spec Spec, key []byte) (*Shape, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: tag %q: %s", ErrTemplate, tag, fmt.Sprintf(format, a...))
	}
	s := &Shape{tag: tag, spec: spec, start: max(spec.Start, 1)}
	var err error
	if s.reset, err = ParseReset(spec.Reset); err != nil {
		return nil, err
	}
	if spec.Format != "" {
		if s.tmpl, err = ParseTemplate(spec.Format); err != nil {
			return nil, err
		}
		s.radix, s.width, s.cap = s.tmpl.radix, s.tmpl.width, s.tmpl.Capacity()
	} else {
		if !spec.Opaque {
			return nil, bad("a shape needs FORMAT or OPAQUE")
		}
		s.radix, s.width, s.cap = 10, OpaqueWidth, 999_999_999_999_999_999
	}
	// The printed date must name the period, or two periods would print the same strings.
	var need, allowed uint16
	switch s.reset {
	case ResetNone:
	case ResetYear:
		need = 1 << fYear4
	case ResetMonth:
		need = 1<<fYear4 | 1<<fMonth
	case ResetDay:
		need = 1<<fYear4 | 1<<fMonth | 1<<fDay
	case ResetHour:
		need = 1<<fYear4 | 1<<fMonth | 1<<fDay | 1<<fHour
	}
	allowed = need | 1<<fYear2
	var fields uint16
	if s.tmpl != nil {
		fields = s.tmpl.fields
	}
	if fields&(1<<fYear2) != 0 { // yy stands for yyyy (2000-2099)
		fields = fields&^(1<<fYear2) | 1<<fYear4
	}
	if s.reset == ResetNone && fields != 0 {
		return nil, bad("date fields need RESET: the date printed is the period the counter belongs to")
	}
	if fields&need != need {
		return nil, bad("RESET %s needs the template to print the %s (%s), or two periods would print the same IDs",
			s.reset, s.reset, needText(s.reset))
	}
	if s.tmpl != nil && s.tmpl.fields&^allowed != 0 {
		return nil, bad("the template prints a date field finer than RESET %s (the period's start would be printed)", s.reset)
	}
	if s.tmpl != nil && s.tmpl.has(fYear2) && s.tmpl.has(fYear4) {
		return nil, bad("both yyyy and yy")
	}
	if spec.TZ != "" && s.reset == ResetNone {
		return nil, bad("TZ needs RESET")
	}
	if s.loc, err = CheckZone(spec.TZ); err != nil {
		return nil, bad("%v", err)
	}
	if s.start > s.cap {
		return nil, bad("START %d does not fit the counter's width (at most %d)", s.start, s.cap)
	}
	if spec.Opaque {
		if len(key) == 0 {
			return nil, fmt.Errorf("%w: tag %q is OPAQUE and this server has no --id-key-file", ErrKey, tag)
		}
		if spec.KeyCheck != "" && spec.KeyCheck != KeyCheck(key) {
			return nil, fmt.Errorf("%w: tag %q was created under another id key (key check %s); refusing rather than issuing IDs that could collide",
				ErrKey, tag, spec.KeyCheck)
		}
		if s.ff, err = ff1.New(key, s.radix); err != nil {
			return nil, bad("%v", err)
		}
		if _, err := s.ff.Domain(s.width); err != nil {
			return nil, bad("OPAQUE needs a counter domain of at least 1,000,000 values (FF1's minimum): widen the counter")
		}
		s.spec.KeyCheck = KeyCheck(key)
	}
	return s, nil
}

func needText(r Reset) string {
	switch r {
	case ResetYear:
		return "{yyyy} or {yy}"
	case ResetMonth:
		return "year and {MM}"
	case ResetDay:
		return "year, {MM} and {dd}"
	default:
		return "year, {MM}, {dd} and {HH}"
	}
}

// Spec returns the spec, with the key check of an opaque tag filled in.
func (s *Shape) Spec() Spec { return s.spec }

// Tag returns the tag.
func (s *Shape) Tag() string { return s.tag }

// Reset returns the period.
func (s *Shape) Reset() Reset { return s.reset }

// Template returns the template, nil for an opaque integer tag.
func (s *Shape) Template() *Template { return s.tmpl }

// Capacity is the largest counter the shape can serve; Start the first.
func (s *Shape) Capacity() int64 { return s.cap }
func (s *Shape) Start() int64    { return s.start }

// Period is one period of a tag: its counter row and the rendered text around the counter.
type Period struct {
	Start, End time.Time // [Start, End); zero for a tag without reset
	Key        string    // "20261201" (day), "202612", "2026", "2026120115" (hour); "" without reset
	Row        string    // the counter's store row: tag + "@" + Key
	prefix     []byte
	suffix     []byte
	tweak      []byte
	// yyOut: the template prints yy and the period is outside 2000-2099, where yy would
	// repeat the strings of another century: nothing is rendered (ErrLimit).
	yyOut bool
}

// RowSep separates a shaped tag's name from its period in counter row names.
const RowSep = "@"

// PeriodAt returns the period that holds t (in the tag's zone). The latest period is cached:
// calls within it allocate nothing.
func (s *Shape) PeriodAt(t time.Time) *Period {
	if p := s.cur.Load(); p != nil && (s.reset == ResetNone || !t.Before(p.Start) && t.Before(p.End)) {
		return p
	}
	var p *Period
	if s.reset == ResetNone {
		p = s.period(time.Time{}, time.Time{})
	} else {
		p = s.periodAround(t)
	}
	s.cur.Store(p)
	return p
}

// NextPeriod returns the period that follows p (nil for a tag without reset), without
// touching PeriodAt's cache: for creating the next period's row ahead of its start.
func (s *Shape) NextPeriod(p *Period) *Period {
	if s.reset == ResetNone || p == nil {
		return nil
	}
	return s.periodAround(p.End)
}

// period builds the period [start, end) (in the tag's zone; zero for a tag without reset).
func (s *Shape) period(start, end time.Time) *Period {
	p := &Period{Start: start, End: end}
	switch s.reset {
	case ResetHour:
		p.Key = start.Format("2006010215")
	case ResetDay:
		p.Key = start.Format("20060102")
	case ResetMonth:
		p.Key = start.Format("200601")
	case ResetYear:
		p.Key = start.Format("2006")
	}
	p.Row = s.tag + RowSep + p.Key
	p.tweak = []byte(s.tag + "\x00" + p.Key)
	if s.tmpl != nil {
		p.yyOut = s.tmpl.has(fYear2) && (start.Year() < 2000 || start.Year() > 2099)
		out := &p.prefix
		for _, pt := range s.tmpl.parts {
			switch {
			case pt.seq:
				out = &p.suffix
			case pt.field != 0:
				*out = appendField(*out, pt.field, start)
			default:
				*out = append(*out, pt.lit...)
			}
		}
	}
	return p
}

func appendField(dst []byte, f field, t time.Time) []byte {
	var v, w int
	switch f {
	case fYear4:
		v, w = t.Year(), 4
	case fYear2:
		v, w = t.Year()%100, 2
	case fMonth:
		v, w = int(t.Month()), 2
	case fDay:
		v, w = t.Day(), 2
	case fHour:
		v, w = t.Hour(), 2
	case fMinute:
		v, w = t.Minute(), 2
	case fSecond:
		v, w = t.Second(), 2
	}
	var b [8]byte
	for i := w - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, b[:w]...)
}

// value maps a counter to the number printed (or returned as an integer): the counter itself,
// or, for an opaque tag, its FF1 image in [1, radix^width). FF1 permutes [0, radix^width);
// the counter 0 is never issued, so the one counter FF1 sends to 0 takes FF1(0) instead (cycle
// walking): a bijection of [1, radix^width) onto itself.
func (s *Shape) value(p *Period, c int64) (uint64, error) {
	if c < s.start || c > s.cap {
		return 0, fmt.Errorf("%w: tag %q: counter %d outside [%d, %d]", ErrLimit, s.tag, c, s.start, s.cap)
	}
	if s.ff == nil {
		return uint64(c), nil
	}
	v, err := s.ff.Encrypt(p.tweak, s.width, uint64(c))
	if err == nil && v == 0 {
		v, err = s.ff.Encrypt(p.tweak, s.width, 0)
	}
	return v, err
}

// counter is the inverse of value.
func (s *Shape) counter(p *Period, v uint64) (int64, error) {
	if s.ff == nil {
		return int64(v), nil
	}
	c, err := s.ff.Decrypt(p.tweak, s.width, v)
	if err == nil && c == 0 {
		c, err = s.ff.Decrypt(p.tweak, s.width, 0)
	}
	return int64(c), err
}

// Append renders counter c of period p to dst. ErrLimit for a counter outside [Start,
// Capacity]: never a longer or wrapped string.
func (s *Shape) Append(dst []byte, p *Period, c int64) ([]byte, error) {
	if p.yyOut {
		return dst, fmt.Errorf("%w: tag %q: {yy} prints the years 2000-2099 only, and the period %s is outside them (is the clock a century off? use {yyyy})", ErrLimit, s.tag, p.Key)
	}
	v, err := s.value(p, c)
	if err != nil {
		return dst, err
	}
	if s.tmpl == nil {
		return strconv.AppendUint(dst, v, 10), nil
	}
	dst = append(dst, p.prefix...)
	dst = s.tmpl.appendCounter(dst, v)
	return append(dst, p.suffix...), nil
}

// Int returns the integer INCR returns for counter c: c itself, or its opaque image.
func (s *Shape) Int(p *Period, c int64) (int64, error) {
	v, err := s.value(p, c)
	return int64(v), err
}

// Parsed is what Parse recovers from an ID.
type Parsed struct {
	Counter int64
	Period  *Period // nil fields Start/End/Key for a tag without reset
}

// Parse maps an ID this tag could have issued (a formatted string, or the decimal integer of
// an opaque tag without template) back to its counter and period. Anything else is ErrParse:
// a wrong literal, length, numeral or date, a date that is not the start of a period, a counter
// outside [Start, Capacity].
func (s *Shape) Parse(id string) (Parsed, error) {
	fail := func(why string) (Parsed, error) {
		return Parsed{}, fmt.Errorf("%w: %q is not an ID of tag %q: %s", ErrParse, id, s.tag, why)
	}
	if s.tmpl == nil {
		v, err := strconv.ParseUint(id, 10, 64)
		if err != nil || v == 0 || v > uint64(s.cap) || strconv.FormatUint(v, 10) != id {
			return fail("not a decimal integer in the tag's domain")
		}
		p := s.period(time.Time{}, time.Time{})
		c, err := s.counter(p, v)
		if err != nil || c < s.start {
			return fail("outside the tag's counters")
		}
		return Parsed{Counter: c, Period: p}, nil
	}
	if len(id) != s.tmpl.MaxLen() {
		return fail(fmt.Sprintf("%d bytes, the tag's IDs have %d", len(id), s.tmpl.MaxLen()))
	}
	year, month, day, hour := 2000, 1, 1, 0
	var cnt string
	pos := 0
	for _, pt := range s.tmpl.parts {
		switch {
		case pt.seq:
			cnt = id[pos : pos+s.tmpl.width]
			pos += s.tmpl.width
		case pt.field != 0:
			w := fieldWidth[pt.field]
			n, ok := decimal(id[pos : pos+w])
			if !ok {
				return fail("date field is not decimal")
			}
			switch pt.field {
			case fYear4:
				year = n
			case fYear2:
				year = 2000 + n
			case fMonth:
				month = n
			case fDay:
				day = n
			case fHour:
				hour = n
			}
			pos += w
		default:
			if id[pos:pos+len(pt.lit)] != pt.lit {
				return fail("literal text differs from the template")
			}
			pos += len(pt.lit)
		}
	}
	var p *Period
	if s.reset == ResetNone {
		p = s.PeriodAt(time.Time{})
	} else {
		// The date must be exactly a period's (no 13th month, no 31 February, no hour a
		// spring-forward skips): rendering the period again gives the same text.
		p = s.periodOfLabel(s.labelOfFields(year, month, day, hour))
		if p == nil || string(p.prefix) != id[:len(p.prefix)] || string(p.suffix) != id[len(id)-len(p.suffix):] {
			return fail("not a valid date of a period")
		}
	}
	v, ok := s.tmpl.parseCounter(cnt)
	if !ok {
		return fail("counter numerals outside the template's radix")
	}
	if s.ff != nil && v == 0 {
		return fail("the counter is never 0")
	}
	c, err := s.counter(p, v)
	if err != nil {
		return fail(err.Error())
	}
	if c < s.start || c > s.cap {
		return fail("counter outside the tag's range")
	}
	return Parsed{Counter: c, Period: p}, nil
}

func decimal(s string) (int, bool) {
	n := 0
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}
