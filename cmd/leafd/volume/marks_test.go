package volume

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// TestAdminToolsMillionMarks: raise-max-id --dry-run and adopt --instances --dry-run run
// against an instance with 1,000,000 marks on default limits (--max-output-buffer included):
// they page through IDS.MARKS. The marks are written straight into the marks file (by
// writemarks, built without -race) and the rows into leaf_alloc (a Leaf table, no fence
// rows); 10 marks are above their row's max_id, which raise-max-id would raise and adopt
// refuses; every other tag is listed once. A page of 10,000 marks (the tools' COUNT) is
// about 240 KB, the whole list some 24 MB: 100 pages under the default 1 MiB output limit.
func TestAdminToolsMillionMarks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a million marks")
	}
	const n, above = 1_000_000, 100_000 // every above-th tag has its mark 5000 over max_id
	writeMarks := filepath.Join(t.TempDir(), "writemarks")
	if out, err := exec.Command("go", "build", "-o", writeMarks, "./writemarks").CombinedOutput(); err != nil {
		t.Fatalf("building writemarks: %v\n%s", err, out)
	}
	dsn, db := e2e.SharedDB(t)
	e2e.SQLExec(t, db, e2e.LeafTableDDL)
	start := time.Now()
	// The rows are inserted by the database while writemarks writes the marks. A million rows
	// take longer than SQLExec's 10 s on a loaded machine.
	insCtx, insCancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer insCancel()
	inserted := make(chan error, 1)
	var insertTook time.Duration // written before the send on inserted
	go func() {
		_, err := db.ExecContext(insCtx, fmt.Sprintf("INSERT INTO leaf_alloc (biz_tag, max_id, step) SELECT CONCAT('t', LPAD(seq, 7, '0')), %d + seq, 1000 FROM seq_1_to_%d", n, n))
		insertTook = time.Since(start)
		inserted <- err
	}()
	dir := t.TempDir()
	// Tag t<i> (seven digits) gets the mark n+i, every above-th one 5000 more.
	if out, err := exec.Command(writeMarks, filepath.Join(dir, "marks.db"), strconv.Itoa(n), strconv.Itoa(above), "5000").CombinedOutput(); err != nil {
		t.Fatalf("writemarks: %v\n%s", err, out)
	}
	marksTook := time.Since(start)
	if err := <-inserted; err != nil {
		t.Fatalf("inserting %d rows: %v", n, err)
	}
	t.Logf("rows inserted in %v, marks written in %v, both in %v", insertTook, marksTook, time.Since(start))
	// The volume is the subject: server and tools run without -race (some tenfold faster);
	// the paging code runs with it in the other tests of IDS.MARKS and of the tools.
	plain := e2e.PlainBinary(t)
	l := e2e.StartAs(t, &e2e.Leafd{Bin: plain}, "--mysql-dsn", dsn, "--data-dir", dir, "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	// The warm start loads the first segment of the 1000 tags marked last, one at a time;
	// each is refused (a Leaf row, not adopted) and dropped. The tools run once it has ended:
	// raise-max-id lists the held tags (IDS.TAGS), then reads each (IDS.INFO), and a tag
	// dropped in between fails it with NOTAG.
	warmFrom := time.Now()
	if !e2e.Poll(60*time.Second, func() bool {
		status, body, err := l.HTTPGet("/readyz", "")
		return err == nil && status == http.StatusOK && strings.Contains(body, `"warming":false`)
	}) {
		t.Fatalf("warm start not done within 60s")
	}
	t.Logf("warm start ended %v after the instance was ready", time.Since(warmFrom).Round(time.Millisecond))

	run := func(args ...string) (stdout string, stderr string, status int) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, plain, args...)
		cmd.Env = append(cmd.Environ(), "LEAFD_MYSQL_DSN="+dsn)
		var errBuf bytes.Buffer
		cmd.Stdout, cmd.Stderr = f, &errBuf
		began := time.Now()
		err = cmd.Run()
		t.Logf("leafd %s: %v", strings.Join(args, " "), time.Since(began))
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			status = ee.ExitCode()
		default:
			t.Fatalf("leafd %s: %v\n%s", strings.Join(args, " "), err, errBuf.String())
		}
		return out, errBuf.String(), status
	}
	// lines counts the lines of the file whose fields satisfy each of the matchers.
	lines := func(file string, match map[string]func([]string) bool) map[string]int {
		t.Helper()
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got := map[string]int{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			for name, m := range match {
				if m(fields) {
					got[name]++
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}

	out, errs, status := run("raise-max-id", "--instances", l.Addr, "--dry-run")
	if status != 0 {
		t.Fatalf("raise-max-id --dry-run: exit %d, want 0:\n%s", status, e2e.Tail(errs, 20))
	}
	got := lines(out, map[string]func([]string) bool{
		// TAG  MARK (instance)  BEFORE  AFTER
		"tag":    func(f []string) bool { return len(f) == 5 && strings.HasPrefix(f[0], "t") && f[0] != "TAG" },
		"raised": func(f []string) bool { return len(f) == 5 && f[0] != "TAG" && f[3] != f[4] },
	})
	if got["tag"] != n || got["raised"] != n/above {
		t.Errorf("raise-max-id --dry-run: %d tags listed, %d to raise; want %d and %d", got["tag"], got["raised"], n, n/above)
	}

	out, errs, status = run("adopt", "--instances", l.Addr, "--dry-run")
	if status != 1 || strings.Count(errs, "not adopted") != n/above {
		t.Fatalf("adopt --instances --dry-run: exit %d, %d refusals; want exit 1 and %d refusals (the marks above max_id):\n%s",
			status, strings.Count(errs, "not adopted"), n/above, e2e.Tail(errs, 20))
	}
	got = lines(out, map[string]func([]string) bool{
		"would":   func(f []string) bool { return len(f) > 2 && strings.Join(f[len(f)-2:], " ") == "would adopt" },
		"refused": func(f []string) bool { return len(f) > 1 && f[len(f)-1] == "refused" },
	})
	if got["would"] != n-n/above || got["refused"] != n/above {
		t.Errorf("adopt --instances --dry-run: %d would adopt, %d refused; want %d and %d", got["would"], got["refused"], n-n/above, n/above)
	}
	if c := e2e.SQLInt(t, db, "SELECT COUNT(*) FROM leafd_fence WHERE biz_tag LIKE 't%'"); c != 0 {
		t.Errorf("leafd_fence after the dry runs: %d rows of the tags, want none", c)
	}
}
