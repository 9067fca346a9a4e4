// Command leafd-bench is leafd's load generator: N connections sending INCR tag,
// IDS.SNOWFLAKE or IDS.SEGMENT tag n, pipelined, to one or several RESP servers; it prints
// throughput and latency quantiles and, with -check, verifies the IDs.
//
//	leafd-bench -addr 127.0.0.1:6380 -c 50 -P 16 -d 10s -cmd incr -check
//	leafd-bench -cmd segment -batch 1000 -P 16 -client goredis    # batches through go-redis
//	leafd-bench -cmd incr -P 16 -tags 100000                        # many tags, round-robin
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/leafd/leafd/bench"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain is main with an exit code: 0 when the run was clean, 1 when it saw error replies,
// failed connections or a failed check, 2 on bad flags.
func realMain(argv []string, stdout, stderr io.Writer) int {
	d := bench.DefaultConfig()
	fs := flag.NewFlagSet("leafd-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addrs := fs.String("addr", strings.Join(d.Addrs, ","), "comma-separated server addresses; connection i goes to address i mod count")
	clients := fs.Int("c", d.Clients, "connections")
	pipeline := fs.Int("P", d.Pipeline, "pipeline depth: requests sent per write")
	dur := fs.Duration("d", d.Duration, "measured duration (ignored with -n)")
	requests := fs.Int64("n", 0, "total requests across all connections (instead of -d)")
	warmup := fs.Duration("warmup", 0, "load before measuring, not counted")
	cmd := fs.String("cmd", string(d.Command), "command: incr (INCR tag), snowflake (IDS.SNOWFLAKE [batch]), segment (IDS.SEGMENT tag batch), incrby (INCRBY tag batch: a block)")
	tag := fs.String("tag", d.Tag, "segment tag")
	batch := fs.Int("batch", 0, "IDs per request for segment and incrby (default 10) and snowflake (default 1)")
	tags := fs.Int("tags", 1, "spread incr/segment over this many tags (tag:0 .. tag:N-1), round-robin; each is touched once before the warm-up")
	client := fs.String("client", bench.ClientRaw, "client library: raw (leafd-bench's own) or goredis (github.com/redis/go-redis/v9 pipelines)")
	quantiles := fs.String("quantiles", "", "write the latency distribution to this file as CSV (quantile,ms) for bench/plot")
	check := fs.Bool("check", false, "keep every ID; verify uniqueness across connections and strict increase per connection")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg := bench.Config{
		Addrs: strings.Split(*addrs, ","), Clients: *clients, Pipeline: *pipeline, Duration: *dur,
		Requests: *requests, Warmup: *warmup, Command: bench.Command(*cmd), Tag: *tag,
		Batch: *batch, Check: *check, Tags: *tags, Client: *client,
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "leafd-bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "leafd-bench:", err)
		return 1
	}
	if *quantiles != "" {
		f, err := os.Create(*quantiles)
		if err == nil {
			err = res.WriteQuantiles(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "leafd-bench:", err)
			return 1
		}
	}
	if *asJSON {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "leafd-bench:", err)
		return 1
	}
	if !res.OK() {
		return 1
	}
	return 0
}
