package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CopyDir copies the regular files of src into dst, as cp -a of a data dir would: the lock
// file comes along, the flock does not. An error fails the test.
func CopyDir(t testing.TB, src, dst string) {
	t.Helper()
	es, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// MarkdownSection is the section of the Markdown file at path that starts at the line
// heading (e.g. "## Error codes") and runs to the next heading of level two, or to the end;
// a file that cannot be read, or has no such heading, fails the test.
func MarkdownSection(t testing.TB, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, heading)
	if start < 0 {
		t.Fatalf("%s: no %s section", filepath.Base(path), heading)
	}
	section := s[start:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	return section
}
