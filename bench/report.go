package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Latency summarizes the per-request latencies of a run, in milliseconds. A request's
// latency runs from the write of its pipeline batch to the parse of its reply, as
// redis-benchmark measures it.
type Latency struct {
	Min  float64 `json:"min_ms"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

// Result is what a run measured. Counts cover the measured part only (after the warm-up).
type Result struct {
	Command  string   `json:"command"`
	Addrs    []string `json:"addrs"`
	Clients  int      `json:"clients"`
	Pipeline int      `json:"pipeline"`
	// Seconds is the measured time: from the end of the warm-up to the last connection's end.
	Seconds        float64 `json:"seconds"`
	Requests       int64   `json:"requests"`
	IDs            int64   `json:"ids"`
	RequestsPerSec float64 `json:"requests_per_sec"`
	IDsPerSec      float64 `json:"ids_per_sec"`
	// Errors counts error replies; FirstError is the first one.
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Latency    Latency `json:"latency"`
	// ConnErrors lists the connections that ended early ("addr: error").
	ConnErrors []string     `json:"conn_errors,omitempty"`
	Check      *CheckResult `json:"check,omitempty"`

	hist *Histogram
}

// Histogram returns the merged latency histogram of all connections.
func (r *Result) Histogram() *Histogram { return r.hist }

// OK reports whether the run saw no error reply, no connection failure and, with Check, no
// duplicate or out-of-order ID.
func (r *Result) OK() bool {
	return r.Errors == 0 && len(r.ConnErrors) == 0 && (r.Check == nil || r.Check.OK)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func newResult(cfg Config, clients []*client, elapsed time.Duration) *Result {
	r := &Result{
		Command:  strings.Join(cfg.args(), " "),
		Addrs:    cfg.Addrs,
		Clients:  cfg.Clients,
		Pipeline: cfg.Pipeline,
		Seconds:  elapsed.Seconds(),
		hist:     NewHistogram(),
	}
	var checks []*connCheck
	var addrs []string
	for _, c := range clients {
		r.hist.Merge(c.hist)
		r.Requests += c.requests
		r.IDs += c.ids
		if c.errs > 0 && r.Errors == 0 {
			r.FirstError = c.firstErr
		}
		r.Errors += c.errs
		if c.err != nil {
			r.ConnErrors = append(r.ConnErrors, c.addr+": "+c.err.Error())
		}
		if c.check != nil {
			checks = append(checks, c.check)
			addrs = append(addrs, c.addr)
		}
	}
	if r.Seconds > 0 {
		r.RequestsPerSec = float64(r.Requests) / r.Seconds
		r.IDsPerSec = float64(r.IDs) / r.Seconds
	}
	h := r.hist
	r.Latency = Latency{
		Min: ms(h.Min()), Mean: ms(h.Mean()), P50: ms(h.Quantile(0.50)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max()),
	}
	if cfg.Check {
		r.Check = verify(checks, addrs)
	}
	return r
}

// WriteText writes the result as a table.
func (r *Result) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "command\tservers\tclients\tpipeline\trequests\tseconds\treq/s\tids/s\terrors\tp50 ms\tp99 ms\tp99.9 ms\tmax ms\t\n")
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.2f\t%.0f\t%.0f\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t\n",
		r.Command, len(r.Addrs), r.Clients, r.Pipeline, r.Requests, r.Seconds,
		r.RequestsPerSec, r.IDsPerSec, r.Errors, r.Latency.P50, r.Latency.P99, r.Latency.P999, r.Latency.Max)
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	if r.FirstError != "" {
		fmt.Fprintf(&b, "first error reply: %s\n", r.FirstError)
	}
	for _, e := range r.ConnErrors {
		fmt.Fprintf(&b, "connection ended early: %s\n", e)
	}
	if c := r.Check; c != nil {
		if c.OK {
			fmt.Fprintf(&b, "check: ok, %d IDs unique, strictly increasing on each of %d connections\n", c.IDs, r.Clients)
		} else {
			fmt.Fprintf(&b, "check: FAILED, %d IDs, %d duplicates %v, %d not increasing", c.IDs, c.Duplicates, c.DuplicateExamples, c.NonIncreasing)
			if c.NonIncreasingExample != "" {
				fmt.Fprintf(&b, " (first: %s)", c.NonIncreasingExample)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the result as one JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// QuantilePoints are the quantiles WriteQuantiles prints: 0 .. 0.9999 spaced evenly on the
// log scale of 1/(1-q) that latency-percentile plots use (10 points per decade).
func QuantilePoints() []float64 {
	var qs []float64
	for i := 0; i <= 40; i++ {
		qs = append(qs, 1-math.Pow(10, -float64(i)/10))
	}
	return qs
}

// WriteQuantiles writes the latency distribution as CSV lines "quantile,ms" (with a header),
// for bench/plot.
func (r *Result) WriteQuantiles(w io.Writer) error {
	var b strings.Builder
	b.WriteString("quantile,ms\n")
	for _, q := range QuantilePoints() {
		fmt.Fprintf(&b, "%.6f,%.4f\n", q, ms(r.hist.Quantile(q)))
	}
	fmt.Fprintf(&b, "%.6f,%.4f\n", 1.0, ms(r.hist.Max()))
	_, err := io.WriteString(w, b.String())
	return err
}
