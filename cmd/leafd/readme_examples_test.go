package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// The README's examples are run as written, in order, on fresh instances, and their output
// compared with what the README shows. A fenced block preceded by the line
// "<!-- readme-test: NAME -->" is an example: in a console block each "$ " line is a command
// and the lines up to the next one its expected output; a sql block is run by an
// administrator. What a command does:
//
//	leafd ... &, go run ./cmd/leafd ... &   start an instance (the binary under test); the
//	                                        README's ports become free ones, relative paths
//	                                        live in the test's directory
//	leafd adopt|raise-max-id ...            run the subcommand, compare its output
//	redis-cli -p PORT args                  redis-cli --no-raw against that instance
//	curl -s http://127.0.0.1:PORT/path      GET on that instance's admin port
//	mysql ... -e "SQL"                      run the SQL in the example's database
//	anything else                           bash, in the test's directory
//
// A command whose comment says "varies" has its numbers compared by shape only; an expected
// line ending in " ..." matches any line that starts with the rest.

// readmeBlock is one marked example.
type readmeBlock struct {
	name, lang string
	lines      []string
}

func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []readmeBlock
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		name, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "<!-- readme-test: ")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, " -->")
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		fence := strings.TrimSpace(lines[j])
		if !strings.HasPrefix(fence, "```") {
			t.Fatalf("README: readme-test %s is not followed by a fenced block", name)
		}
		indent := lines[j][:strings.Index(lines[j], "```")]
		blk := readmeBlock{name: name, lang: strings.TrimPrefix(fence, "```")}
		for j++; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			blk.lines = append(blk.lines, strings.TrimPrefix(lines[j], indent))
		}
		out = append(out, blk)
		i = j
	}
	return out
}

// shellWords splits a command line as a POSIX shell would for the README's commands: single
// and double quotes, backslash escapes in double quotes, a comment from a word-initial '#'.
// It returns the words and the comment.
func shellWords(line string) (words []string, comment string) {
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte(`"\$`+"`", line[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(line[i])
			}
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words, strings.TrimSpace(line[i+1:])
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, ""
}

// readmeRun runs examples: the instances it started by README port, and the substitutions
// that put the example on the test's database.
type readmeRun struct {
	t      *testing.T
	dir    string
	extra  []string          // flags added to every instance started
	subst  map[string]string // README text -> the test's, in commands
	ports  map[string]*e2e.Leafd
	httpOf map[string]*e2e.Leafd
	db     *sql.DB
}

func newReadmeRun(t *testing.T) *readmeRun {
	return &readmeRun{t: t, dir: t.TempDir(), subst: map[string]string{}, ports: map[string]*e2e.Leafd{}, httpOf: map[string]*e2e.Leafd{}}
}

func (r *readmeRun) block(b readmeBlock) {
	r.t.Helper()
	type step struct {
		line string
		want []string
	}
	var steps []step
	for _, l := range b.lines {
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			steps = append(steps, step{line: cmd})
		} else if len(steps) > 0 {
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
		} else {
			r.t.Fatalf("README %s: output %q before any command", b.name, l)
		}
	}
	for _, s := range steps {
		words, comment := shellWords(s.line)
		got := r.command(b.name, s.line, words)
		if !readmeOutputMatches(got, s.want, strings.Contains(comment, "varies")) {
			r.t.Errorf("README %s: $ %s\ngot:\n%s\nwant:\n%s", b.name, s.line, got, strings.Join(s.want, "\n"))
		}
	}
}

func (r *readmeRun) substitute(s string) string {
	for k, v := range r.subst {
		s = strings.ReplaceAll(s, k, v)
	}
	return s
}

// command runs one README command and returns its output.
func (r *readmeRun) command(block, line string, words []string) string {
	t := r.t
	t.Helper()
	for i := range words {
		words[i] = r.substitute(words[i])
	}
	background := len(words) > 0 && words[len(words)-1] == "&"
	if background {
		words = words[:len(words)-1]
	}
	switch {
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/leafd":
		return r.start(words[3:])
	case len(words) >= 1 && words[0] == "leafd" && background:
		return r.start(words[1:])
	case len(words) >= 2 && words[0] == "leafd":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, e2e.Binary(), words[1:]...)
		cmd.Dir = r.dir
		out, _ := cmd.CombinedOutput()
		return string(out)
	case len(words) >= 1 && words[0] == "redis-cli":
		port, args := "6380", words[1:]
		if len(args) >= 2 && args[0] == "-p" {
			port, args = args[1], args[2:]
		}
		l := r.ports[port]
		if l == nil {
			t.Fatalf("README %s: redis-cli -p %s: no instance started on that port", block, port)
		}
		host, lport, _ := strings.Cut(l.Addr, ":")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"--no-raw", "-h", host, "-p", lport}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("README %s: $ %s: %v\n%s", block, line, err, out)
		}
		return string(out)
	case len(words) >= 1 && words[0] == "curl":
		u := words[len(words)-1]
		m := regexp.MustCompile(`^http://127\.0\.0\.1:(\d+)(/.*)$`).FindStringSubmatch(u)
		if m == nil || r.httpOf[m[1]] == nil {
			t.Fatalf("README %s: curl %s: no instance's admin port", block, u)
		}
		resp, err := http.Get("http://" + r.httpOf[m[1]].HTTPAddr + m[2])
		if err != nil {
			t.Fatalf("README %s: $ %s: %v", block, line, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	case len(words) >= 1 && words[0] == "mysql":
		for i, w := range words {
			if w == "-e" && i+1 < len(words) {
				if r.db == nil {
					t.Fatalf("README %s: mysql before the database was set up", block)
				}
				if _, err := r.db.Exec(words[i+1]); err != nil {
					t.Fatalf("README %s: $ %s: %v", block, line, err)
				}
				return ""
			}
		}
		t.Fatalf("README %s: mysql without -e", block)
	}
	cmd := exec.Command("bash", "-c", r.substitute(line))
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README %s: $ %s: %v\n%s", block, line, err, out)
	}
	return string(out)
}

// start starts an instance with the README's flags but its ports, which the harness
// chooses as for any instance (e2e.Start).
func (r *readmeRun) start(args []string) string {
	r.t.Helper()
	readmeAddr, readmeHTTP := "127.0.0.1:6380", "127.0.0.1:8080"
	var kept []string
	for i := 0; i < len(args); i++ {
		if i+1 < len(args) {
			switch args[i] {
			case "--addr":
				readmeAddr = args[i+1]
				i++
				continue
			case "--http-addr":
				readmeHTTP = args[i+1]
				i++
				continue
			case "--data-dir", "--id-key-file":
				kept = append(kept, args[i], args[i+1])
				if !filepath.IsAbs(args[i+1]) {
					kept[len(kept)-1] = filepath.Join(r.dir, args[i+1])
				}
				i++
				continue
			}
		}
		kept = append(kept, args[i])
	}
	l := &e2e.Leafd{}
	e2e.StartAs(r.t, l, append(kept, r.extra...)...)
	_, port, _ := strings.Cut(readmeAddr, ":")
	_, hport, _ := strings.Cut(readmeHTTP, ":")
	r.ports[port], r.httpOf[hport] = l, l
	return ""
}

var readmeNumber = regexp.MustCompile(`\d+`)

// readmeOutputMatches compares a command's output with the README's lines.
func readmeOutputMatches(got string, want []string, varies bool) bool {
	g := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if strings.TrimSpace(got) == "" {
		g = nil
	}
	if len(g) != len(want) {
		return false
	}
	for i := range g {
		a, b := strings.TrimRight(g[i], " "), strings.TrimRight(want[i], " ")
		if varies {
			a, b = readmeNumber.ReplaceAllString(a, "N"), readmeNumber.ReplaceAllString(b, "N")
		}
		if p, ok := strings.CutSuffix(b, " ..."); ok {
			if !strings.HasPrefix(a, p) {
				return false
			}
			continue
		}
		if a != b {
			return false
		}
	}
	return true
}

// TestReadmeTour runs the README's five-minute tour on a fresh embedded-store instance. The
// period clock is set to the README's day (2026-12-01 in Asia/Shanghai), so the dates it
// shows are the ones printed.
func TestReadmeTour(t *testing.T) {
	e2e.NeedTool(t, "redis-cli")
	r := newReadmeRun(t)
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	offset := time.Until(time.Date(2026, 12, 1, 12, 0, 0, 0, shanghai)).Truncate(time.Second)
	r.extra = []string{"--period-clock-offset", offset.String()}
	n := 0
	for _, b := range readmeBlocks(t) {
		if b.name == "tour" {
			r.block(b)
			n++
		}
	}
	if n != 1 {
		t.Fatalf("README: %d tour blocks, want 1", n)
	}
}

// TestReadmeMySQL runs the README's MySQL quick start and the Leaf adoption example on a
// fresh database of the test server: the setup SQL as an administrator (with the database
// and user names made unique), then the instances and commands as the README's user.
func TestReadmeMySQL(t *testing.T) {
	t.Parallel()
	e2e.NeedTool(t, "redis-cli")
	admin := testenv.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(admin)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%012x", rand.Uint64()>>16)
	dbName, user := "leafd_t_readme_"+suffix, "leafd_t_"+suffix
	rootCfg := cfg.Clone()
	rootCfg.DBName = ""
	root, err := sql.Open("mysql", rootCfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = root.Exec("DROP DATABASE IF EXISTS `" + dbName + "`")
		_, _ = root.Exec("DROP USER IF EXISTS '" + user + "'@'%'")
		root.Close()
	})
	r := newReadmeRun(t)
	r.subst["leafd:change-me@tcp(127.0.0.1:3306)/ids"] = user + ":change-me@tcp(" + cfg.Addr + ")/" + dbName
	var blocks []string
	for _, b := range readmeBlocks(t) {
		if !strings.HasPrefix(b.name, "mysql") {
			continue
		}
		blocks = append(blocks, b.name)
		if b.lang == "sql" {
			var code []string
			for _, l := range b.lines {
				if !strings.HasPrefix(strings.TrimSpace(l), "--") {
					code = append(code, l)
				}
			}
			sqlText := strings.Join(code, "\n")
			sqlText = regexp.MustCompile(`\bids\b`).ReplaceAllString(sqlText, dbName)
			sqlText = strings.ReplaceAll(sqlText, "'leafd'@", "'"+user+"'@")
			for _, stmt := range splitSQL(sqlText) {
				if _, err := root.Exec(stmt); err != nil {
					t.Fatalf("README %s: %s: %v", b.name, stmt, err)
				}
			}
			dbCfg := cfg.Clone()
			dbCfg.DBName = dbName
			if r.db, err = sql.Open("mysql", dbCfg.FormatDSN()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.db.Close() })
			continue
		}
		r.block(b)
	}
	if strings.Join(blocks, " ") != "mysql-setup mysql mysql-leaf" {
		t.Fatalf("README: MySQL examples %v, want mysql-setup mysql mysql-leaf", blocks)
	}
}

// TestReadmeExamplesMarked: every README block that shows commands with their output (lines
// starting with "$ ") is a marked example, so none is left out of the tests above.
func TestReadmeExamplesMarked(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	marked := false
	for i := 0; i < len(lines); i++ {
		trim := strings.TrimSpace(lines[i])
		if strings.HasPrefix(trim, "<!-- readme-test: ") {
			marked = true
			continue
		}
		if !strings.HasPrefix(trim, "```") {
			if trim != "" {
				marked = false
			}
			continue
		}
		start := i
		shows := false
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			if strings.HasPrefix(strings.TrimSpace(lines[i]), "$ ") {
				shows = true
			}
		}
		if shows && !marked {
			t.Errorf("README.md:%d: a block of commands with output that no test runs (mark it <!-- readme-test: NAME -->)", start+1)
		}
		marked = false
	}
}
