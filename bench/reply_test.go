package bench

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadReply(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []int64
		wantErr string // a *ReplyError's text, or "protocol"
	}{
		{name: "integer", in: ":42\r\n", want: []int64{42}},
		{name: "negative integer", in: ":-7\r\n", want: []int64{-7}},
		{name: "max int64", in: ":9223372036854775807\r\n", want: []int64{9223372036854775807}},
		{name: "min int64", in: ":-9223372036854775808\r\n", want: []int64{-9223372036854775808}},
		{name: "array of integers", in: "*3\r\n:1\r\n:2\r\n:3\r\n", want: []int64{1, 2, 3}},
		{name: "empty array", in: "*0\r\n", want: nil},
		{name: "null array", in: "*-1\r\n", want: nil},
		{name: "simple string", in: "+OK\r\n", want: nil},
		{name: "bulk string skipped", in: "$5\r\nhello\r\n", want: nil},
		{name: "null bulk", in: "$-1\r\n", want: nil},
		{name: "RESP2 decode reply", in: "*4\r\n$12\r\ntimestamp_ms\r\n:17\r\n$9\r\nworker_id\r\n:3\r\n", want: []int64{17, 3}},
		{name: "RESP3 map and null", in: "%2\r\n+a\r\n:1\r\n+b\r\n_\r\n", want: []int64{1}},
		{name: "nested", in: "*2\r\n*2\r\n:1\r\n:2\r\n:3\r\n", want: []int64{1, 2, 3}},
		{name: "error reply", in: "-NOTAG tag 'x' does not exist\r\n", wantErr: "NOTAG tag 'x' does not exist"},
		{name: "error inside array", in: "*2\r\n-ERR a\r\n:5\r\n", want: []int64{5}, wantErr: "ERR a"},
		{name: "integer overflow", in: ":9223372036854775808\r\n", wantErr: "protocol"},
		{name: "not a number", in: ":12a\r\n", wantErr: "protocol"},
		{name: "bare LF", in: ":1\n", wantErr: "protocol"},
		{name: "unknown type", in: "?\r\n", wantErr: "protocol"},
		{name: "too deep", in: strings.Repeat("*1\r\n", maxDepth+1) + ":1\r\n", wantErr: "protocol"},
	}
	for _, tt := range tests {
		for _, split := range []bool{false, true} {
			name := tt.name
			var rd io.Reader = strings.NewReader(tt.in)
			if split {
				name += "/one byte at a time"
				rd = iotest.OneByteReader(rd)
			}
			t.Run(name, func(t *testing.T) {
				r := NewReader(rd, 0)
				got, err := r.ReadReply(nil)
				if !slices.Equal(got, tt.want) {
					t.Errorf("got %v, want %v", got, tt.want)
				}
				var re *ReplyError
				switch {
				case tt.wantErr == "" && err != nil:
					t.Errorf("got error %v, want none", err)
				case tt.wantErr == "protocol" && !errors.Is(err, ErrProtocol):
					t.Errorf("got error %v, want ErrProtocol", err)
				case tt.wantErr != "" && tt.wantErr != "protocol" && (!errors.As(err, &re) || re.Msg != tt.wantErr):
					t.Errorf("got error %v, want reply error %q", err, tt.wantErr)
				}
			})
		}
	}
}

// TestReadReplyStream reads many pipelined replies through a small buffer: lines and bulks
// straddle refills.
func TestReadReplyStream(t *testing.T) {
	var in bytes.Buffer
	var want []int64
	for i := range 2000 {
		switch i % 4 {
		case 0:
			in.WriteString(":" + strconv.Itoa(i) + "\r\n")
			want = append(want, int64(i))
		case 1:
			in.WriteString("*2\r\n:" + strconv.Itoa(i) + "\r\n:" + strconv.Itoa(i+1) + "\r\n")
			want = append(want, int64(i), int64(i+1))
		case 2:
			in.WriteString("$700\r\n" + strings.Repeat("x", 700) + "\r\n")
		case 3:
			in.WriteString("-ERR " + strconv.Itoa(i) + "\r\n")
		}
	}
	r := NewReader(&in, 512)
	var got []int64
	errs := 0
	for range 2000 {
		var err error
		got, err = r.ReadReply(got)
		var re *ReplyError
		if errors.As(err, &re) {
			errs++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %d integers, want %d (first difference matters)", len(got), len(want))
	}
	if errs != 500 {
		t.Errorf("got %d error replies, want 500", errs)
	}
	if _, err := r.ReadReply(nil); err != io.EOF {
		t.Errorf("after the last reply got %v, want io.EOF", err)
	}
}

func TestReadReplyLineTooLong(t *testing.T) {
	r := NewReader(strings.NewReader("+"+strings.Repeat("a", 600)+"\r\n"), 512)
	if _, err := r.ReadReply(nil); !errors.Is(err, ErrProtocol) {
		t.Errorf("got %v, want ErrProtocol", err)
	}
}

// loopReader serves the same bytes forever.
type loopReader struct {
	b []byte
	i int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], l.b[l.i:])
		n += k
		l.i = (l.i + k) % len(l.b)
	}
	return n, nil
}

func TestReadReplyAllocs(t *testing.T) {
	r := NewReader(&loopReader{b: []byte(":1234567\r\n*3\r\n:1\r\n:2\r\n:3\r\n+OK\r\n$3\r\nabc\r\n")}, 4096)
	dst := make([]int64, 0, 8)
	allocs := testing.AllocsPerRun(10000, func() {
		var err error
		if dst, err = r.ReadReply(dst[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("ReadReply allocates %v times per reply, want 0", allocs)
	}
}

func BenchmarkReadReply(b *testing.B) {
	r := NewReader(&loopReader{b: []byte(":1234567890123\r\n")}, 64<<10)
	dst := make([]int64, 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = r.ReadReply(dst[:0])
	}
}
