// Command plot draws latency-percentile curves from leafd-bench -quantiles files: one line
// per file, latency against percentile on the usual log scale of 1/(1-q), as a PNG.
//
//	go run . -o latency.png -title "INCR, 50 connections" leafd=leafd.csv redis-server=redis.csv
//
// It is a module of its own so that leafd's module does not depend on gonum/plot.
package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() {
	out := flag.String("o", "latency.png", "output PNG")
	title := flag.String("title", "latency by percentile", "plot title")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: plot [-o out.png] [-title t] label=file.csv ...")
		os.Exit(2)
	}
	if err := run(*out, *title, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

// palette gives each series a distinct colour and dash pattern (readable in grey too).
var palette = []color.RGBA{
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
}

func run(out, title string, series []string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (ms)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = percentileTicks{}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	for i, s := range series {
		label, file, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("%q: want label=file.csv", s)
		}
		pts, err := readQuantiles(file)
		if err != nil {
			return err
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		if i%2 == 1 {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(label, l)
	}
	return p.Save(8*vg.Inch, 4.5*vg.Inch, out)
}

// readQuantiles reads "quantile,ms" lines; quantile q becomes x = 1/(1-q), and q = 1 (the
// maximum) is left out (it has no place on the scale).
func readQuantiles(file string) (plotter.XYs, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var pts plotter.XYs
	for i, r := range rows {
		if i == 0 || len(r) < 2 {
			continue // header
		}
		q, err1 := strconv.ParseFloat(r[0], 64)
		v, err2 := strconv.ParseFloat(r[1], 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", file, i+1, err)
		}
		if q >= 1 {
			continue
		}
		pts = append(pts, plotter.XY{X: 1 / (1 - q), Y: v})
	}
	if len(pts) == 0 {
		return nil, fmt.Errorf("%s: no quantiles", file)
	}
	return pts, nil
}

// percentileTicks labels the decades of 1/(1-q): 0%, 90%, 99%, 99.9%, 99.99%.
type percentileTicks struct{}

func (percentileTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := 0.0; math.Pow(10, e) <= max*1.0001; e++ {
		x := math.Pow(10, e)
		if x < min/1.0001 {
			continue
		}
		q := 100 * (1 - 1/x)
		label := strconv.FormatFloat(q, 'f', -1, 64) + "%"
		if e > 0 {
			label = strconv.FormatFloat(q, 'f', int(e)-2, 64) + "%"
			if e <= 2 {
				label = strconv.FormatFloat(q, 'f', 0, 64) + "%"
			}
		}
		ts = append(ts, plot.Tick{Value: x, Label: label})
		// Unlabelled minor ticks at 2..9 of each decade.
		for k := 2.0; k < 10; k++ {
			if m := k * x; m <= max*1.0001 {
				ts = append(ts, plot.Tick{Value: m})
			}
		}
	}
	return ts
}
