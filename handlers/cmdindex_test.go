package handlers

import (
	"strings"
	"testing"
)

func TestCmdIndexFinds(t *testing.T) {
	var x cmdIndex
	cmds := commands()
	for _, c := range cmds {
		x.add(c)
	}
	for _, c := range cmds {
		for _, name := range []string{c.name, strings.ToUpper(c.name), mixedCase(c.name)} {
			if got := x.find([]byte(name)); got != c {
				t.Errorf("find(%q) = %v, want %s", name, got, c.name)
			}
		}
		// A prefix, a longer name and one letter changed are other names.
		for _, name := range []string{c.name[:len(c.name)-1], c.name + "x", c.name[:len(c.name)-1] + "\x00"} {
			if got := x.find([]byte(name)); got != nil && got.name != strings.ToLower(name) {
				t.Errorf("find(%q) = %s", name, got.name)
			}
		}
	}
	for _, name := range []string{"", "nosuchcommand", "incrr", "inc", "INCR\x00", strings.Repeat("a", 300)} {
		if got := x.find([]byte(name)); got != nil {
			t.Errorf("find(%q) = %s, want none", name, got.name)
		}
	}
	most := 0
	for _, b := range x.buckets {
		most = max(most, len(b))
	}
	if most > 3 {
		t.Errorf("a bucket holds %d commands: the look-up compares each; spread the names (cmdBucket)", most)
	}
}

func mixedCase(s string) string {
	b := []byte(s)
	for i := range b {
		if i%2 == 0 && 'a' <= b[i] && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

func TestCmdLookupNoAllocs(t *testing.T) {
	h := New(Config{}, nil, nil, nil)
	name := []byte("InCr")
	if n := testing.AllocsPerRun(100, func() {
		if h.lookup(name) == nil {
			t.Fatal("INCR not found")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per look-up", n)
	}
}
