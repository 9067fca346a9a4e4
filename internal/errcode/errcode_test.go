package errcode

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leafd/leafd/internal/testkit"
)

// TestTableWellFormed: names are unique upper-case words, each with an HTTP error status.
func TestTableWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for i, c := range Table {
		if !regexp.MustCompile(`^[A-Z]{3,}$`).MatchString(c.Name) || seen[c.Name] {
			t.Errorf("Table[%d] %q: want a unique upper-case code", i, c.Name)
		}
		seen[c.Name] = true
		if c.HTTP < 400 || c.HTTP > 599 {
			t.Errorf("%s: HTTP %d, want an error status", c.Name, c.HTTP)
		}
		if got := Index(c.Name); got != i {
			t.Errorf("Index(%s) = %d, want %d", c.Name, got, i)
		}
	}
	if got, _ := Status("ERR", MsgInternal); got != statusInternal {
		t.Errorf("ERR internal error: HTTP %d, want 500", got)
	}
	if got, _ := Status("NOSUCHCODE", "x"); got != statusInternal {
		t.Errorf("a code outside the table: HTTP %d, want 500", got)
	}
	var n Counts
	n.Add("LEADER")
	n.Add("NOSUCHCODE")
	got := map[string]uint64{}
	n.Each(func(label string, v uint64) { got[label] = v })
	if len(got) != len(Table)+1 || got["LEADER"] != 1 || got[Other] != 1 || got["NOTAG"] != 0 {
		t.Errorf("Counts: got %v, want LEADER 1, other 1, a series for every code", got)
	}
}

// TestTableCoversSource: every code the server's source sends (handlers/, resp/, admin/,
// found as deploy's TestReadmeErrorCodes finds them, plus the admin port's JSON bodies) is
// in Table, so none is counted as "other".
func TestTableCoversSource(t *testing.T) {
	re := regexp.MustCompile(`(?:(?:replyError|Refusal)\(\s*(?:fmt\.Sprintf\()?"|return "|refuse\(c, "|WriteError\("|authBody\{")([A-Z]{3,})[ "]`)
	found := map[string]bool{}
	for _, dir := range []string{"../../handlers", "../../resp", "../../admin", "../../ids"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllStringSubmatch(string(src), -1) {
				found[m[1]] = true
			}
		}
	}
	for _, want := range []string{"NOTAG", "NOCACHE", "TRYAGAIN", "NOAUTH"} {
		if !found[want] {
			t.Fatalf("the source scan found no %s: the pattern is stale (found %v)", want, found)
		}
	}
	for code := range found {
		if Index(code) == len(Table) {
			t.Errorf("%s: sent by the server, missing from Table", code)
		}
	}
}

// TestReadmeListsTable: README.md's error-code table has a row for every code of Table.
func TestReadmeListsTable(t *testing.T) {
	section := testkit.MarkdownSection(t, "../../README.md", "## Error codes")
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range regexp.MustCompile("`([A-Z]+)`").FindAllStringSubmatch(cells[1], -1) {
			listed[m[1]] = true
		}
	}
	for _, c := range Table {
		if !listed[c.Name] {
			t.Errorf("README.md's error codes: no row for %s", c.Name)
		}
	}
}
