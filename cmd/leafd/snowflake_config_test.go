package main

import (
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/leafd/leafd/snowflake/zk"
)

// TestSnowflakeOptionsNotSilent: a zero or negative snowflake duration never silently means the
// default: it is refused with a message naming the option.
func TestSnowflakeOptionsNotSilent(t *testing.T) {
	// Accepted: the lease (plus the tolerance with ZooKeeper) within --start-wait-max.
	for _, args := range [][]string{
		{"--lease-window", "10s"},
		{"--zk-outage-tolerance", "30s"}, // no ZooKeeper: not used
		{"--zk-addrs", "127.0.0.1:2181", "--zk-outage-tolerance", "7s"},
	} {
		if _, err := loadConfig(args, func(string) string { return "" }, io.Discard); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clock-back-max", "0"}, "--clock-back-max"},
		{[]string{"--clock-back-max", "-1ms"}, "--clock-back-max"},
		{[]string{"--lease-window", "0"}, "--lease-window"},
		{[]string{"--lease-window", "-3s"}, "--lease-window"},
		{[]string{"--start-wait-max", "0"}, "--start-wait-max"},
		{[]string{"--start-wait-max", "-1s"}, "--start-wait-max"},
		{[]string{"--zk-outage-tolerance", "-1s"}, "--zk-outage-tolerance"},
		{[]string{"--zk-session-timeout", "0"}, "--zk-session-timeout"},
		{[]string{"--zk-addrs", "127.0.0.1:2181/leaf/"}, "--zk-addrs"},
		{[]string{"--zk-addrs", "/leaf"}, "--zk-addrs"},
		// A restart after a crash waits the lease (plus the tolerance): longer than
		// --start-wait-max would crash-loop.
		{[]string{"--lease-window", "11s"}, "--start-wait-max 10s"},
		{[]string{"--lease-window", "20s", "--start-wait-max", "15s"}, "--lease-window 20s"},
		{[]string{"--zk-addrs", "127.0.0.1:2181", "--zk-outage-tolerance", "8s"}, "--zk-outage-tolerance 8s"},
	} {
		_, err := loadConfig(tc.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	cfg, err := loadConfig([]string{"--zk-addrs", "10.0.0.1:2181,10.0.0.2:2181/leaf", "--zk-outage-tolerance", "0"},
		func(string) string { return "" }, io.Discard)
	if err != nil || cfg.ZKOutageTolerance != 0 {
		t.Errorf("a chroot and a zero tolerance: got %v", err)
	}
}

// TestAdvertiseAddrLoopbackRefused: with ZooKeeper and no --advertise-addr on a host that has
// only loopback addresses, the start stops with a message naming --advertise-addr (127.0.0.1 is
// shared by every such host).
func TestAdvertiseAddrLoopbackRefused(t *testing.T) {
	old := defaultAdvertiseAddr
	defaultAdvertiseAddr = func(string) (string, error) { return "", zk.ErrNoAdvertiseAddr }
	defer func() { defaultAdvertiseAddr = old }()
	cfg, err := loadConfig([]string{"--zk-addrs", "127.0.0.1:1", "--data-dir", t.TempDir()}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	src, err := openZKSource(cfg, 1023, zap.NewNop())
	if err == nil {
		src.Close()
		t.Fatal("loopback-only host: got a source, want a refusal")
	}
	if !strings.Contains(err.Error(), "--advertise-addr") {
		t.Errorf("got %v, want a message naming --advertise-addr", err)
	}
}
