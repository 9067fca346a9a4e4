package mysqlstore

import (
	"strings"
	"testing"
)

// TestFoldFloors: the floor of a tag is the highest mark of any spelling strings.EqualFold
// takes for it (a case-insensitive collation serves them from one row), and only of those.
func TestFoldFloors(t *testing.T) {
	floors := foldFloors(map[string]int64{"Order": 10, "ORDER": 30, "order": 20, "pay": 5, "ſ": 7, "K": 3})
	for _, tc := range []struct {
		tag  string
		want int64
	}{
		{"order", 30}, {"oRdEr", 30}, {"pay", 5}, {"PAY", 5}, {"s", 7}, {"S", 7}, {"\u212a", 3}, {"orders", 0},
	} {
		if got := floors[foldKey(tc.tag)]; got != tc.want {
			t.Errorf("floor of %q: got %d, want %d", tc.tag, got, tc.want)
		}
	}
	for _, pair := range [][2]string{{"ſ", "S"}, {"\u212a", "k"}, {"Straße", "STRASSE"}, {"a", "b"}} {
		if (foldKey(pair[0]) == foldKey(pair[1])) != strings.EqualFold(pair[0], pair[1]) {
			t.Errorf("foldKey(%q) == foldKey(%q) disagrees with strings.EqualFold", pair[0], pair[1])
		}
	}
}
