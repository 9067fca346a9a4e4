// Package shape turns a tag's counter into the ID a user sees: a template of literal text, the
// period's date fields and a padded counter (ORD20261201000042), a periodic reset (one
// counter per day, month or year in a time zone) and an opaque form (the counter through FF1,
// NIST SP 800-38G, under a key). It knows nothing of stores or RESP: the handlers fetch the
// counter from the segment generator (one store row per period) and render it here.
//
// A compiled Shape is immutable and safe for concurrent use. Rendering appends to the
// caller's buffer and allocates nothing.
package shape

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors, wrapped with %w.
var (
	// ErrTemplate: the template, its reset, zone or options cannot be accepted.
	ErrTemplate = errors.New("shape: invalid shape")
	// ErrLimit: a counter past the template's width (or below 1).
	ErrLimit = errors.New("shape: counter outside the template's width")
	// ErrParse: the string is not one this tag could have issued.
	ErrParse = errors.New("shape: not an ID of this tag")
	// ErrKey: an opaque tag and no key, or not the key it was created with.
	ErrKey = errors.New("shape: id key missing or not the tag's key")
)

// Radix-62 and radix-36 numerals in ASCII order, so that fixed-width strings sort as their
// numbers do.
const (
	digits62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	digits36 = "0123456789abcdefghijklmnopqrstuvwxyz"
)

// MaxTemplateLen bounds a template and the IDs it renders, in bytes.
const MaxTemplateLen = 100

// Date fields, by their Java letters (java.time DateTimeFormatter / SimpleDateFormat).
type field uint8

const (
	fYear4  field = iota + 1 // yyyy
	fYear2                   // yy: 2000-2099
	fMonth                   // MM
	fDay                     // dd
	fHour                    // HH
	fMinute                  // mm
	fSecond                  // ss
)

var fieldWidth = [...]int{fYear4: 4, fYear2: 2, fMonth: 2, fDay: 2, fHour: 2, fMinute: 2, fSecond: 2}

// part is one piece of a template: literal text, a date field or the counter.
type part struct {
	lit   string
	field field
	seq   bool
}

// Template is a parsed template.
type Template struct {
	src    string
	parts  []part
	radix  int // counter radix: 10, 36 or 62
	width  int // counter width in numerals
	fields uint16
	digits string
}

// maxWidth is the widest counter of each radix whose values all fit in an int64.
func maxWidth(radix int) int {
	switch radix {
	case 10:
		return 18
	case 36:
		return 12
	default:
		return 10
	}
}

// ParseTemplate parses a template: literal printable ASCII other than '{' and '}', date fields
// in braces with Java letters ({yyyyMMdd}, {yyMM}, {HH}; other characters inside the braces are
// literal, as in {yyyy-MM-dd}), and exactly one counter: {seq:N} (decimal), {seq36:N} or
// {seq62:N}, zero-padded to N numerals.
func ParseTemplate(src string) (*Template, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: template %q: %s", ErrTemplate, src, fmt.Sprintf(format, a...))
	}
	if src == "" {
		return nil, bad("empty")
	}
	if len(src) > MaxTemplateLen {
		return nil, bad("%d bytes, at most %d", len(src), MaxTemplateLen)
	}
	t := &Template{src: src}
	addLit := func(s string) {
		if s == "" {
			return
		}
		if n := len(t.parts); n > 0 && t.parts[n-1].field == 0 && !t.parts[n-1].seq {
			t.parts[n-1].lit += s
			return
		}
		t.parts = append(t.parts, part{lit: s})
	}
	for i := 0; i < len(src); {
		c := src[i]
		if c < 0x21 || c > 0x7e {
			return nil, bad("byte %d is 0x%02x; only printable ASCII without space is allowed", i, c)
		}
		if c == '}' {
			return nil, bad("'}' at byte %d without '{'", i)
		}
		if c != '{' {
			j := i
			for j < len(src) && src[j] != '{' && src[j] != '}' && src[j] >= 0x21 && src[j] <= 0x7e {
				j++
			}
			addLit(src[i:j])
			i = j
			continue
		}
		end := strings.IndexByte(src[i:], '}')
		if end < 0 {
			return nil, bad("'{' at byte %d is not closed", i)
		}
		body := src[i+1 : i+end]
		i += end + 1
		if strings.HasPrefix(body, "seq") {
			if t.width != 0 {
				return nil, bad("more than one counter")
			}
			name, n, ok := strings.Cut(body, ":")
			switch name {
			case "seq":
				t.radix, t.digits = 10, digits62[:10]
			case "seq36":
				t.radix, t.digits = 36, digits36
			case "seq62":
				t.radix, t.digits = 62, digits62
			default:
				return nil, bad("unknown counter {%s}: use {seq:N}, {seq36:N} or {seq62:N}", body)
			}
			w, err := strconv.Atoi(n)
			if !ok || err != nil || w < 1 || w > maxWidth(t.radix) {
				return nil, bad("counter {%s}: the width must be 1 to %d numerals", body, maxWidth(t.radix))
			}
			t.width = w
			t.parts = append(t.parts, part{seq: true})
			continue
		}
		if body == "" {
			return nil, bad("empty braces")
		}
		for k := 0; k < len(body); {
			r := body[k]
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				if r == '{' {
					return nil, bad("'{' inside braces")
				}
				addLit(body[k : k+1])
				k++
				continue
			}
			run := 1
			for k+run < len(body) && body[k+run] == r {
				run++
			}
			var f field
			switch {
			case r == 'y' && run == 4:
				f = fYear4
			case r == 'y' && run == 2:
				f = fYear2
			case r == 'M' && run == 2:
				f = fMonth
			case r == 'd' && run == 2:
				f = fDay
			case r == 'H' && run == 2:
				f = fHour
			case r == 'm' && run == 2:
				f = fMinute
			case r == 's' && run == 2:
				f = fSecond
			default:
				return nil, bad("date field %q: use yyyy, yy, MM, dd, HH, mm or ss", body[k:k+run])
			}
			t.fields |= 1 << f
			t.parts = append(t.parts, part{field: f})
			k += run
		}
	}
	if t.width == 0 {
		return nil, bad("no counter: add {seq:N}, {seq36:N} or {seq62:N}")
	}
	if n := t.MaxLen(); n > MaxTemplateLen {
		return nil, bad("renders %d bytes, at most %d", n, MaxTemplateLen)
	}
	return t, nil
}

// String returns the template's source.
func (t *Template) String() string { return t.src }

// Radix and Width describe the counter.
func (t *Template) Radix() int { return t.radix }
func (t *Template) Width() int { return t.width }

// Capacity is the largest counter the template can print: radix^width − 1.
func (t *Template) Capacity() int64 {
	c := int64(1)
	for range t.width {
		c *= int64(t.radix)
	}
	return c - 1
}

// MaxLen is the length of every string the template renders.
func (t *Template) MaxLen() int {
	n := 0
	for _, p := range t.parts {
		switch {
		case p.seq:
			n += t.width
		case p.field != 0:
			n += fieldWidth[p.field]
		default:
			n += len(p.lit)
		}
	}
	return n
}

func (t *Template) has(f field) bool { return t.fields&(1<<f) != 0 }

// appendCounter appends v, below radix^width, zero-padded.
func (t *Template) appendCounter(dst []byte, v uint64) []byte {
	var buf [20]byte
	r := uint64(t.radix)
	for i := t.width - 1; i >= 0; i-- {
		buf[i] = t.digits[v%r]
		v /= r
	}
	return append(dst, buf[:t.width]...)
}

// parseCounter reads width numerals of the template's radix.
func (t *Template) parseCounter(s string) (uint64, bool) {
	var v uint64
	for i := range len(s) {
		d := strings.IndexByte(t.digits, s[i])
		if d < 0 {
			return 0, false
		}
		v = v*uint64(t.radix) + uint64(d)
	}
	return v, true
}
