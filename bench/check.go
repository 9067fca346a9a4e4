package bench

import (
	"fmt"
	"slices"
)

// connCheck keeps the IDs of one connection and counts the ones not above their predecessor.
type connCheck struct {
	ids           []int64
	last          int64
	have          bool
	nonIncreasing int64
	firstBad      string
}

func (k *connCheck) add(vs []int64) {
	for _, v := range vs {
		if k.have && v <= k.last {
			if k.nonIncreasing == 0 {
				k.firstBad = fmt.Sprintf("%d after %d", v, k.last)
			}
			k.nonIncreasing++
		}
		k.last, k.have = v, true
	}
	k.ids = append(k.ids, vs...)
}

// CheckResult is the verdict of a run with Check on.
type CheckResult struct {
	// OK is true when no ID was seen twice and every connection's IDs strictly increased.
	OK bool `json:"ok"`
	// IDs is the number of IDs received (warm-up included).
	IDs int64 `json:"ids"`
	// Duplicates counts IDs received more than once, across all connections.
	Duplicates int64 `json:"duplicates"`
	// DuplicateExamples lists a few of them.
	DuplicateExamples []int64 `json:"duplicate_examples,omitempty"`
	// NonIncreasing counts IDs not above the previous ID on the same connection.
	NonIncreasing int64 `json:"non_increasing"`
	// NonIncreasingExample describes the first one ("5 after 7 on 127.0.0.1:6380").
	NonIncreasingExample string `json:"non_increasing_example,omitempty"`
}

const maxExamples = 5

// verify checks the IDs of every connection and releases them.
func verify(checks []*connCheck, addrs []string) *CheckResult {
	res := &CheckResult{}
	var total int
	for _, k := range checks {
		total += len(k.ids)
	}
	all := make([]int64, 0, total)
	for i, k := range checks {
		all = append(all, k.ids...)
		k.ids = nil
		res.NonIncreasing += k.nonIncreasing
		if k.nonIncreasing > 0 && res.NonIncreasingExample == "" {
			res.NonIncreasingExample = k.firstBad + " on " + addrs[i]
		}
	}
	res.IDs = int64(len(all))
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			if res.Duplicates < maxExamples && (len(res.DuplicateExamples) == 0 || res.DuplicateExamples[len(res.DuplicateExamples)-1] != all[i]) {
				res.DuplicateExamples = append(res.DuplicateExamples, all[i])
			}
			res.Duplicates++
		}
	}
	res.OK = res.Duplicates == 0 && res.NonIncreasing == 0
	return res
}
