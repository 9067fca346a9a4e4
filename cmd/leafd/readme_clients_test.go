package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeClientSnippets: every code block the client notes (docs/CLIENTS.md) show is the code a
// client script of the compatibility suite runs. The scripts mark the blocks with
// "README:begin <name>" and "README:end" comment lines; the notes must contain each block
// verbatim (indentation removed), and must show no snippet the scripts do not run.
func TestReadmeClientSnippets(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "CLIENTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "clients", "*.*"))
	node, _ := filepath.Glob(filepath.Join("testdata", "clients", "node", "*.js"))
	files = append(files, node...)
	found := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for name, block := range snippets(string(b)) {
			found[name] = true
			if !strings.Contains(string(readme), block) {
				t.Errorf("docs/CLIENTS.md does not show the %q block of %s verbatim:\n%s", name, f, block)
			}
		}
	}
	for _, want := range []string{"redis-py", "redis-py-errors", "redis-rb", "redis-rb-errors", "ioredis", "ioredis-errors", "node-redis", "node-redis4"} {
		if !found[want] {
			t.Errorf("no script has the README block %q", want)
		}
	}
	// Each README block of the notes names its source block; each must exist.
	for _, line := range strings.Split(string(readme), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "<!-- client-snippet: "); ok {
			name = strings.TrimSuffix(name, " -->")
			if !found[name] {
				t.Errorf("docs/CLIENTS.md shows a snippet %q that no script of the suite runs", name)
			}
		}
	}
}

// snippets returns the marked blocks of a script, each dedented, with a final newline.
func snippets(src string) map[string]string {
	out := map[string]string{}
	var name string
	var block []string
	for _, line := range strings.Split(src, "\n") {
		trim := strings.TrimSpace(line)
		trim = strings.TrimLeft(trim, "#/ ")
		switch {
		case strings.HasPrefix(trim, "README:begin "):
			name, block = strings.TrimPrefix(trim, "README:begin "), nil
		case trim == "README:end" && name != "":
			out[name] = dedent(block)
			name = ""
		case name != "":
			block = append(block, line)
		}
	}
	return out
}

func dedent(lines []string) string {
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	var b strings.Builder
	for _, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}
