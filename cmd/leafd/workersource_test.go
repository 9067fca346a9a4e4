package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func loadWith(args []string, env map[string]string) (Config, error) {
	return loadConfig(args, func(k string) string { return env[k] }, io.Discard)
}

const testDSN = "u:p@tcp(db:3306)/leaf"

// TestWorkerSourceAuto: the default follows the deployment: --worker-id → static,
// --zk-addrs → zookeeper, --mysql-dsn alone → mysql, nothing → file; an explicit
// --worker-source wins.
func TestWorkerSourceAuto(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "file"},
		{[]string{"--mysql-dsn", testDSN}, "mysql"},
		{[]string{"--mysql-dsn", testDSN, "--worker-id", "3"}, "static"},
		{[]string{"--mysql-dsn", testDSN, "--zk-addrs", "zk:2181"}, "zookeeper"},
		{[]string{"--zk-addrs", "zk:2181"}, "zookeeper"},
		{[]string{"--worker-id", "0"}, "static"},
		{[]string{"--mysql-dsn", testDSN, "--worker-source", "file"}, "file"},
		{[]string{"--worker-source", "statefulset"}, "statefulset"},
		{[]string{"--worker-source", "mysql", "--mysql-dsn", testDSN}, "mysql"},
	} {
		cfg, err := loadWith(tc.args, nil)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := cfg.Source(); got != tc.want {
			t.Errorf("%v: source %s, want %s", tc.args, got, tc.want)
		}
	}
	cfg, err := loadWith(nil, map[string]string{"LEAFD_MYSQL_DSN": testDSN})
	if err != nil || cfg.Source() != "mysql" {
		t.Errorf("LEAFD_MYSQL_DSN alone: source %s, %v; want mysql", cfg.Source(), err)
	}
}

// TestWorkerSourceRefusals: each inconsistent combination is refused with a message naming
// the flags.
func TestWorkerSourceRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--worker-source", "etcd"}, `--worker-source "etcd"`},
		{[]string{"--worker-source", "mysql"}, "needs --mysql-dsn"},
		{[]string{"--worker-source", "zookeeper"}, "needs --zk-addrs"},
		{[]string{"--worker-source", "static"}, "needs --worker-id"},
		{[]string{"--worker-source", "mysql", "--mysql-dsn", testDSN, "--zk-addrs", "zk:2181"}, "--zk-addrs is set but --worker-source is mysql"},
		{[]string{"--worker-source", "file", "--worker-id", "2"}, "--worker-id is set but --worker-source is file"},
		{[]string{"--mysql-dsn", testDSN, "--worker-lease", "3s"}, "must be longer than --lease-window 3s"},
		{[]string{"--mysql-dsn", testDSN, "--worker-lease", "200ms", "--lease-window", "100ms"}, "at least 300ms"},
		{[]string{"--mysql-dsn", testDSN, "--worker-lease", "9s"}, "not below --start-wait-max 10s"},
		{[]string{"--pod-ordinal", "2"}, "are for --worker-source statefulset"},
		{[]string{"--worker-source", "statefulset", "--worker-offset", "-1"}, "--worker-offset -1"},
	} {
		_, err := loadWith(tc.args, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	if _, err := loadWith([]string{"--mysql-dsn", testDSN, "--worker-lease", "12s", "--start-wait-max", "15s", "--lease-window", "3s"}, nil); err != nil {
		t.Errorf("a longer lease with a longer --start-wait-max: %v", err)
	}
}

// TestPodOrdinal: --pod-ordinal (or LEAFD_POD_ORDINAL), else the hostname's -N suffix; a
// hostname without one is refused, saying what to set.
func TestPodOrdinal(t *testing.T) {
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	for _, tc := range []struct {
		host string
		want int64
		ok   bool
	}{
		{"leafd-0", 0, true}, {"leafd-17", 17, true}, {"my-app-leafd-3", 3, true},
		{"leafd", 0, false}, {"leafd-", 0, false}, {"leafd-x1", 0, false}, {"leafd-+1", 0, false},
	} {
		n, _, err := podOrdinal(Config{PodOrdinal: -1}, host(tc.host))
		if tc.ok && (err != nil || n != tc.want) {
			t.Errorf("%s: %d, %v; want %d", tc.host, n, err, tc.want)
		}
		if !tc.ok && (!errors.Is(err, errNoOrdinal) || !strings.Contains(err.Error(), "LEAFD_POD_ORDINAL")) {
			t.Errorf("%s: got %d, %v; want errNoOrdinal naming LEAFD_POD_ORDINAL", tc.host, n, err)
		}
	}
	cfg, err := loadWith([]string{"--worker-source", "statefulset"}, map[string]string{"LEAFD_POD_ORDINAL": "4"})
	if err != nil {
		t.Fatal(err)
	}
	if n, from, err := podOrdinal(cfg, host("leafd-9")); n != 4 || err != nil || from != "--pod-ordinal" {
		t.Errorf("LEAFD_POD_ORDINAL=4 over hostname leafd-9: %d from %s, %v", n, from, err)
	}
}

// TestStatefulSetWorkerID: offset + ordinal, refused when it does not fit the layout.
func TestStatefulSetWorkerID(t *testing.T) {
	host := func() (string, error) { return "leafd-2", nil }
	if id, err := statefulSetWorkerID(Config{PodOrdinal: -1, WorkerOffset: 100}, 1023, host); id != 102 || err != nil {
		t.Errorf("offset 100 + ordinal 2: %d, %v", id, err)
	}
	if id, err := statefulSetWorkerID(Config{PodOrdinal: -1}, 1, host); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("ordinal 2 with worker ids 0-1: %d, %v; want a refusal", id, err)
	}
	if id, err := statefulSetWorkerID(Config{PodOrdinal: -1, WorkerOffset: 2}, 3, host); err == nil {
		t.Errorf("offset 2 + ordinal 2 with worker ids 0-3: %d, want a refusal", id)
	}
	if id, err := statefulSetWorkerID(Config{PodOrdinal: -1, WorkerOffset: 1}, 3, host); id != 3 || err != nil {
		t.Errorf("offset 1 + ordinal 2 with worker ids 0-3: %d, %v", id, err)
	}
}
