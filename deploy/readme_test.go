package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leafd/leafd/internal/testkit"
)

// anchor is GitHub's anchor of a heading: lower case, punctuation dropped, spaces as '-'.
func anchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestReadmeContents: the README's table of contents links only to headings it has, and
// every top-level section is in it.
func TestReadmeContents(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	heads := map[string]bool{}
	var top []string
	inCode := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		if strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ") {
			h := strings.TrimLeft(line, "# ")
			heads[anchor(h)] = true
			if strings.HasPrefix(line, "## ") {
				top = append(top, anchor(h))
			}
		}
	}
	i := strings.Index(s, "**Contents:**")
	if i < 0 {
		t.Fatal("README.md: no **Contents:** table of contents")
	}
	toc := s[i : i+strings.Index(s[i:], "\n\n")]
	links := map[string]bool{}
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(toc, -1) {
		links[m[1]] = true
		if !heads[m[1]] {
			t.Errorf("README contents: #%s is no heading", m[1])
		}
	}
	for _, h := range top {
		if !links[h] {
			t.Errorf("README contents: section #%s is not listed", h)
		}
	}
}

// TestReadmeErrorCodes: every error code the server sends (the codes in handlers/ and
// resp/ source) has a row in the README's error-code table with a "what to do" cell.
func TestReadmeErrorCodes(t *testing.T) {
	table := testkit.MarkdownSection(t, "../README.md", "## Error codes")
	todo := map[string]string{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			continue
		}
		for _, m := range regexp.MustCompile("`([A-Z]+)`").FindAllStringSubmatch(cells[1], -1) {
			todo[m[1]] = strings.TrimSpace(cells[3])
		}
	}
	codes := map[string]bool{}
	re := regexp.MustCompile(`(?:(?:replyError|Refusal)\(\s*(?:fmt\.Sprintf\()?"|return "|refuse\(c, "|WriteError\(")([A-Z]{3,})[ "]`)
	for _, dir := range []string{"../handlers", "../resp", "../admin", "../ids"} {
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
				codes[m[1]] = true
			}
		}
	}
	for _, want := range []string{"NOTAG", "LIMIT", "NOCACHE", "NOPROTO", "ERR", "UNAVAILABLE"} {
		if !codes[want] {
			t.Errorf("the source scan found no %s: the pattern is stale (found %v)", want, codes)
		}
	}
	for code := range codes {
		if code == "QUEUED" || code == "PONG" || code == "OK" || code == "RESET" {
			continue
		}
		if w, ok := todo[code]; !ok || w == "" {
			t.Errorf("README error codes: %s has no row with what to do (got %q)", code, w)
		}
	}
}
