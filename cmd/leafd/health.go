package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// health is `leafd health`: it asks the admin port of a running leafd for /healthz (or
// /readyz with --ready) and returns 0 when the answer is 200, 1 otherwise, 2 for bad usage.
// The container image's HEALTHCHECK runs it, since the image has no shell and no curl. The
// address is --addr, else LEAFD_HTTP_ADDR (what the server listens on), else the default
// 127.0.0.1:8080; an unspecified host (0.0.0.0, ::, empty) is probed on loopback.
func health(args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("leafd health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "admin address to probe (default: $LEAFD_HTTP_ADDR, else 127.0.0.1:8080)")
	ready := fs.Bool("ready", false, "probe /readyz (can serve IDs) instead of /healthz (process alive)")
	mode := fs.String("mode", "", "with --ready: probe one mode's readiness, segment or snowflake (default: every enabled mode)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "leafd health: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	target, err := probeTarget(*addr, getenv)
	if err != nil {
		fmt.Fprintln(stderr, "leafd health:", err)
		return 2
	}
	path := "/healthz"
	switch {
	case *mode != "" && (!*ready || *mode != "segment" && *mode != "snowflake"):
		fmt.Fprintf(stderr, "leafd health: --mode %q: want segment or snowflake, with --ready\n", *mode)
		return 2
	case *mode != "":
		path = "/readyz?mode=" + *mode
	case *ready:
		path = "/readyz"
	}
	token, scheme, client, err := healthClient(getenv) // healthauth.go
	if err != nil {
		fmt.Fprintln(stderr, "leafd health:", err)
		return 2
	}
	if err := probe(client, scheme+"://"+target+path, token, *timeout); err != nil {
		fmt.Fprintln(stderr, "leafd health:", err)
		return 1
	}
	return 0
}

// probeTarget is the host:port to probe: addr, else LEAFD_HTTP_ADDR, else the default, with
// an unspecified host replaced by loopback.
func probeTarget(addr string, getenv func(string) string) (string, error) {
	if addr == "" {
		addr = getenv("LEAFD_HTTP_ADDR")
	}
	if addr == "" {
		addr = "127.0.0.1:8080" // --http-addr's default
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("admin address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), nil
}

func probe(client *http.Client, url, token string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL.Path, resp.Status)
	}
	return nil
}
