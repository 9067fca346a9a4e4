package main

import (
	"bufio"
	"io"
	"strings"
)

// table writes rows as columns aligned two spaces apart, like text/tabwriter, in time linear
// in the rows: the admin tools list a row per tag, and tabwriter takes some 40 s for a million.
type table struct {
	rows  [][]string
	width []int
}

// row adds one row of cells.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i == len(t.width) {
			t.width = append(t.width, 0)
		}
		t.width[i] = max(t.width[i], len(c))
	}
	t.rows = append(t.rows, cells)
}

// writeTo writes the rows to w; the last cell of a row is not padded.
func (t *table) writeTo(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, r := range t.rows {
		for i, c := range r {
			bw.WriteString(c)
			if i < len(r)-1 {
				bw.WriteString(strings.Repeat(" ", t.width[i]-len(c)+2))
			}
		}
		bw.WriteByte('\n')
	}
	t.rows = nil
	return bw.Flush()
}
