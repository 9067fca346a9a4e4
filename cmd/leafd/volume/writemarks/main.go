// Command writemarks writes the marks file of TestAdminToolsMillionMarks: marks of the tags
// t0000001 to t<n> (seven digits), tag i's mark n+i, every above-th one over more. The test
// builds it without -race: a million bbolt puts take some tenfold longer under the race
// detector, and the marks file is the test's fixture, not its subject.
//
//	writemarks <marks.db> <n> <above> <over>
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "writemarks:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("usage: writemarks <marks.db> <n> <above> <over>")
	}
	var nums [3]int
	for i, a := range args[1:] {
		v, err := strconv.Atoi(a)
		if err != nil || v < 1 {
			return fmt.Errorf("argument %q: want a positive integer", a)
		}
		nums[i] = v
	}
	n, above, over := nums[0], nums[1], int64(nums[2])
	mf, err := boltstore.OpenMarkFile(args[0])
	if err != nil {
		return err
	}
	ms := make([]segment.Mark, 0, n)
	for i := 1; i <= n; i++ {
		m := segment.Mark{Tag: fmt.Sprintf("t%07d", i), End: int64(n + i)}
		if i%above == 0 {
			m.End += over
		}
		ms = append(ms, m)
	}
	if err := mf.RaiseAll(ms); err != nil {
		_ = mf.Close()
		return err
	}
	return mf.Close()
}
