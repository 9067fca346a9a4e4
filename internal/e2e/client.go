package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client returns a pooled go-redis client for the server (RESP3 unless proto says
// otherwise), closed at cleanup. No retries: a test sees every error.
func (l *Leafd) Client(proto int) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: l.Addr, Protocol: proto, DisableIdentity: false,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 64,
		MaxRetries: -1,
	})
	l.t.Cleanup(func() { _ = c.Close() })
	return c
}

// ConnClient is a go-redis client with exactly one connection, so that what it sees is what
// one connection sees (per-connection order is a guarantee under test). No retries.
func ConnClient(addr string) *redis.Client {
	quietRedis.Do(func() { redis.SetLogger(nopLogger{}) })
	return redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
}

// quietRedis silences go-redis's pool log, which reports every refused dial while an
// instance is down (expected in these tests; they count those errors themselves).
var quietRedis sync.Once

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

// ReplyCode returns the code of an error reply (its first word), or ok=false for an error
// that is not a reply (connection refused or reset, timeout).
func ReplyCode(err error) (code string, ok bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return "", false
	}
	code, _, _ = strings.Cut(err.Error(), " ")
	return code, true
}

// Do runs one command on a fresh connection.
func (l *Leafd) Do(args ...any) (any, error) {
	c := ConnClient(l.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// Incr runs one INCR on a fresh connection.
func (l *Leafd) Incr(tag string) (int64, error) {
	c := ConnClient(l.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Incr(ctx, tag).Result()
}

// WaitIncr retries INCR until it returns a number or timeout passes; it returns the number,
// the time it took and the last error.
func (l *Leafd) WaitIncr(tag string, timeout time.Duration) (int64, time.Duration, error) {
	t0 := time.Now()
	var v int64
	var err error
	Poll(timeout, func() bool {
		v, err = l.Incr(tag)
		return err == nil
	})
	return v, time.Since(t0), err
}

// InfoInt reads one integer field of an INFO section.
func (l *Leafd) InfoInt(section, field string) int64 {
	l.t.Helper()
	c := ConnClient(l.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	txt, err := c.Info(ctx, section).Result()
	if err != nil {
		l.t.Fatalf("INFO %s: %v", section, err)
	}
	return InfoField(l.t, txt, field)
}

// InfoField parses one integer field out of an INFO reply.
func InfoField(t testing.TB, info, field string) int64 {
	t.Helper()
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("INFO %s=%q: %v", field, v, err)
			}
			return n
		}
	}
	t.Fatalf("INFO has no field %s:\n%s", field, info)
	return 0
}

// RedisCLI runs redis-cli against the server and returns its output.
func (l *Leafd) RedisCLI(args ...string) (string, error) {
	host, port, _ := net.SplitHostPort(l.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// NeedTool fails (in CI, or with LEAFD_TEST_REQUIRE) or skips when a command-line tool is
// missing, and returns its path.
func NeedTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		msg := fmt.Sprintf("%s not found: install redis-tools (bash scripts/test.sh does it)", name)
		if os.Getenv("CI") != "" || os.Getenv("LEAFD_TEST_REQUIRE") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// StopClean checks that nothing but the checker is connected any more (no client connection
// leaked), then stops each server gracefully and wants a quick exit with status 0 (a
// goroutine that does not stop would hold shutdown up).
func StopClean(t testing.TB, ls ...*Leafd) {
	t.Helper()
	for i, l := range ls {
		var n int64
		if !Poll(3*time.Second, func() bool {
			n = l.InfoInt("clients", "connected_clients")
			return n <= 1
		}) {
			t.Errorf("instance %d: got %d connected clients after the load ended, want 1 (the INFO connection)", i, n)
		}
		t0 := time.Now()
		if err := l.Stop(10 * time.Second); err != nil {
			t.Errorf("instance %d: stop: got exit %v, want status 0\n%s", i, err, Tail(l.Log(), 30))
		} else if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("instance %d: stop: exit took %v, want under 5s", i, d)
		}
	}
}

// Addrs returns a function listing the servers' RESP addresses (for Load.Addrs).
func Addrs(ls ...*Leafd) func() []string {
	return func() []string {
		out := make([]string, len(ls))
		for i, l := range ls {
			out[i] = l.Addr
		}
		return out
	}
}
