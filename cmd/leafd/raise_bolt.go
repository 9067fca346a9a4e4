package main

// leafd raise-max-id --data-dir: the embedded store's step after restoring a copy of
// leafd.db (docs/SEGMENT.md, "Backup and restore"). With leafd stopped, it raises max_id of
// every tag in <data-dir>/leafd.db to at least the instance's mark of the tag (the highest
// range end it was ever granted, kept in <data-dir>/marks.db) plus --margin, only upward.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
)

// runRaiseBolt raises the tags of the embedded store in dataDir and returns the exit status.
func runRaiseBolt(ctx context.Context, dataDir string, margin int64, dryRun bool, timeout time.Duration, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(stderr, "leafd raise-max-id:", err)
		return 1
	}
	// A short lock wait: a running leafd holds both files, and must be stopped first.
	st, err := boltstore.OpenBolt(filepath.Join(dataDir, "leafd.db"), boltstore.BoltOptions{LockTimeout: time.Second})
	if err != nil {
		return fail(fmt.Errorf("%w (stop leafd first)", err))
	}
	defer st.Close()
	mf, err := boltstore.OpenMarkFile(filepath.Join(dataDir, "marks.db"))
	if err != nil {
		return fail(fmt.Errorf("%w (stop leafd first)", err))
	}
	defer mf.Close()
	marks := map[string]int64{}
	for _, src := range []segment.Marks{mf, st} { // marks.db, and any left in leafd.db by earlier versions
		ms, err := src.AllMarks()
		if err != nil {
			return fail(fmt.Errorf("read marks: %w", err))
		}
		for _, m := range ms {
			marks[m.Tag] = max(marks[m.Tag], m.End)
		}
	}
	tags := make([]string, 0, len(marks))
	for tag := range marks {
		tags = append(tags, tag)
	}
	slices.Sort(tags)
	status := 0
	var tw table
	tw.row("TAG", "MARK (marks.db)", "MAX_ID BEFORE", "MAX_ID AFTER")
	for _, tag := range tags {
		target := marks[tag] + margin
		tctx, cancel := context.WithTimeout(ctx, timeout)
		var before, after int64
		if dryRun {
			before, err = st.MaxID(tctx, tag)
			after = max(before, target)
		} else {
			before, after, err = st.RaiseMaxID(tctx, tag, target)
		}
		cancel()
		if errors.Is(err, segment.ErrUnknownTag) {
			tw.row(tag, strconv.FormatInt(marks[tag], 10), "(no row)", "(no row)")
			continue
		}
		if err != nil {
			fmt.Fprintf(stderr, "leafd raise-max-id: tag %q: %v\n", tag, err)
			status = 1
			continue
		}
		tw.row(tag, strconv.FormatInt(marks[tag], 10), strconv.FormatInt(before, 10), strconv.FormatInt(after, 10))
	}
	_ = tw.writeTo(stdout)
	if dryRun {
		fmt.Fprintln(stdout, "dry run: nothing changed")
	}
	return status
}
