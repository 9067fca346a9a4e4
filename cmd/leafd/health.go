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
// address is --addr, else the server's --http-addr as the server reads it (flag,
// LEAFD_HTTP_ADDR, the config file; default 127.0.0.1:8080); an unspecified host (0.0.0.0,
// ::, empty) is probed on loopback. The token and TLS are the server's options too.
func health(args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("leafd health", flag.ContinueOnError)
	var c Config
	shared := []string{"http-addr", "http-auth", "http-auth-file", "http-tls", "requirepass", "requirepass-file"}
	shareOptions(fs, &c, shared...)
	addr := fs.String("addr", "", "admin address to probe (default: the server's --http-addr, from LEAFD_HTTP_ADDR or its config file)")
	ready := fs.Bool("ready", false, "probe /readyz (can serve IDs) instead of /healthz (process alive)")
	mode := fs.String("mode", "", "with --ready: probe one mode's readiness, segment or snowflake (default: every enabled mode)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	usage := func() {
		fmt.Fprintln(stderr, "usage: leafd health [--ready [--mode segment|snowflake]] [--addr host:port] [options]")
		fs.PrintDefaults()
	}
	if err := loadShared(fs, &c, shared, args, getenv, stderr, usage); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "leafd health:", err)
		return 2
	}
	target, err := probeTarget(*addr, c.HTTPAddr)
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
	token, scheme, client := healthClient(c) // healthauth.go
	if err := probe(client, scheme+"://"+target+path, token, *timeout); err != nil {
		fmt.Fprintln(stderr, "leafd health:", err)
		return 1
	}
	return 0
}

// probeTarget is the host:port to probe: addr, else the server's httpAddr, else the default,
// with an unspecified host replaced by loopback.
func probeTarget(addr, httpAddr string) (string, error) {
	if addr == "" {
		addr = httpAddr
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
