package e2e

// Snowflake and ZooKeeper helpers: INFO snowflake, IDS.SNOWFLAKE and IDS.DECODE through a
// client, and a plain ZooKeeper client to read leafd's nodes.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/leafd/leafd/snowflake"
	"github.com/redis/go-redis/v9"
)

// ZKTestName is a cluster name unique to the test and the run (a developer's long-lived
// LEAFD_TEST_ZK keeps the nodes of earlier runs).
func ZKTestName(t testing.TB) string {
	t.Helper()
	n := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return n + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// ZKArgs are the arguments of an instance listening on a fresh port that is also its
// advertised identity. The port is picked (FreeAddr), not chosen at the bind: leafd reads
// its ZooKeeper identity from the flags before it listens, and the tests compare that
// identity with the instance's address (the node name is addr-seq, an instance of the same
// identity is started with --advertise-addr set to another's Addr).
func ZKArgs(t testing.TB, zkAddr, name string, extra ...string) []string {
	t.Helper()
	addr := FreeAddr(t)
	return append([]string{"--zk-addrs", zkAddr, "--name", name, "--addr", addr, "--advertise-addr", addr,
		"--zk-session-timeout", "1s"}, extra...)
}

// SFInfo returns the fields of INFO snowflake.
func SFInfo(t testing.TB, c *redis.Client) map[string]string {
	t.Helper()
	s, err := c.Info(context.Background(), "snowflake").Result()
	if err != nil {
		t.Fatalf("INFO snowflake: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

func SFInfoInt(t testing.TB, c *redis.Client, key string) int64 {
	t.Helper()
	m := SFInfo(t, c)
	v, err := strconv.ParseInt(m[key], 10, 64)
	if err != nil {
		t.Fatalf("INFO snowflake %s: got %q, want an integer (%v)", key, m[key], m)
	}
	return v
}

func SFNext(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	id, err := c.Do(context.Background(), "IDS.SNOWFLAKE").Int64()
	if err != nil {
		t.Fatalf("IDS.SNOWFLAKE: %v", err)
	}
	return id
}

// SFDecode returns IDS.DECODE's fields as integers (time as the string's length check aside).
func SFDecode(t testing.TB, c *redis.Client, id int64) (tsMs, worker, seq int64, tm string) {
	t.Helper()
	v, err := c.Do(context.Background(), "IDS.DECODE", id).Result()
	if err != nil {
		t.Fatalf("IDS.DECODE %d: %v", id, err)
	}
	m := map[string]any{}
	switch r := v.(type) {
	case map[any]any: // RESP3
		for k, x := range r {
			m[fmt.Sprint(k)] = x
		}
	case []any: // RESP2: flat array
		for i := 0; i+1 < len(r); i += 2 {
			m[fmt.Sprint(r[i])] = r[i+1]
		}
	default:
		t.Fatalf("IDS.DECODE %d: got %T %v, want a map", id, v, v)
	}
	num := func(k string) int64 {
		n, ok := m[k].(int64)
		if !ok {
			t.Fatalf("IDS.DECODE %d: field %s = %v (%T), want an integer", id, k, m[k], m[k])
		}
		return n
	}
	tm, _ = m["time"].(string)
	return num("timestamp_ms"), num("worker_id"), num("sequence"), tm
}

// WorkerOf returns the instance's worker id, checking INFO against IDS.DECODE of a new ID. It
// waits (up to 20s) for snowflake to serve: a start leaves the wait for the time bound to the
// background.
func WorkerOf(t testing.TB, l *Leafd) int64 {
	t.Helper()
	c := l.Client(3)
	id := WaitServing(t, c, 20*time.Second)
	w := SFInfoInt(t, c, "snowflake_worker_id")
	if _, dw, _, _ := SFDecode(t, c, id); dw != w {
		t.Fatalf("%s: IDS.DECODE says worker %d, INFO says %d", l.Addr, dw, w)
	}
	return w
}

// WaitServing polls IDS.SNOWFLAKE until it returns an ID, for at most d.
func WaitServing(t testing.TB, c *redis.Client, d time.Duration) int64 {
	t.Helper()
	var id int64
	var err error
	if !Poll(d, func() bool {
		id, err = c.Do(context.Background(), "IDS.SNOWFLAKE").Int64()
		return err == nil
	}) {
		t.Fatalf("IDS.SNOWFLAKE still failing after %v: %v", d, err)
	}
	return id
}

// ZKAdmin is a plain ZooKeeper client for inspecting nodes.
func ZKAdmin(t testing.TB, addr string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// ZKForever is a forever node's JSON: Leaf's Endpoint.
type ZKForever struct {
	IP        string `json:"ip"`
	Port      string `json:"port"`
	Timestamp int64  `json:"timestamp"`
}

// ForeverNode reads the node of worker id under /snowflake/<name>/forever.
func ForeverNode(t testing.TB, c *zk.Conn, name string, id int64) (string, ZKForever) {
	t.Helper()
	dir := "/snowflake/" + name + "/forever"
	kids, _, err := c.Children(dir)
	if err != nil {
		t.Fatalf("children of %s: %v", dir, err)
	}
	for _, k := range kids {
		if strings.HasSuffix(k, fmt.Sprintf("-%010d", id)) {
			b, _, err := c.Get(dir + "/" + k)
			if err != nil {
				t.Fatal(err)
			}
			var n ZKForever
			if err := json.Unmarshal(b, &n); err != nil {
				t.Fatalf("node %s: %v: %s", k, err, b)
			}
			return k, n
		}
	}
	t.Fatalf("no node for worker id %d in %s: %v", id, dir, kids)
	return "", ZKForever{}
}

// ZKStateNode is leafd's state node of a worker id (/snowflake/<name>/state/<id>).
type ZKStateNode struct {
	Holder        string `json:"holder"`
	Instance      string `json:"instance"`
	Token         string `json:"token"`
	ReservedUntil int64  `json:"reserved_until"`
	Reuse         bool   `json:"reuse"`
	ToleranceMs   int64  `json:"tolerance_ms"`
}

// StateNode reads the state node of worker id; ok is false when it cannot be read.
func StateNode(c *zk.Conn, name string, id int64) (ZKStateNode, bool) {
	b, _, err := c.Get(fmt.Sprintf("/snowflake/%s/state/%d", name, id))
	var st ZKStateNode
	if err != nil || json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, true
}

func MustState(t testing.TB, c *zk.Conn, name string, id int64) ZKStateNode {
	t.Helper()
	st, ok := StateNode(c, name, id)
	if !ok {
		t.Fatalf("no readable state node for worker id %d of %s", id, name)
	}
	return st
}

// WaitNoLive waits until the ephemeral live node of worker id is gone (its holder's session
// expired).
func WaitNoLive(t testing.TB, c *zk.Conn, name string, id int64, d time.Duration) {
	t.Helper()
	p := fmt.Sprintf("/snowflake/%s/live/%d", name, id)
	var err error
	if !Poll(d, func() bool {
		var ok bool
		ok, _, err = c.Exists(p)
		return err == nil && !ok
	}) {
		t.Fatalf("%s still exists after %v (%v)", p, d, err)
	}
}

// CheckFenced checks a holder whose worker id a successor took over while it was paused:
// every ID the old holder issued (before the pause and after waking) lies below the
// successor's first ID and in a millisecond below the successor's start bound, the
// successor's later IDs (more) increase past first, no ID was issued twice, and the old
// holder's log says it lost the worker id.
func CheckFenced(t testing.TB, old *Leafd, successor *redis.Client, oldIDs, more []int64, first int64) {
	t.Helper()
	ms := func(id int64) int64 { return snowflake.DefaultLayout().Decode(id).TimestampMs }
	if len(oldIDs) > 0 {
		top := slices.Max(oldIDs)
		if top >= first {
			t.Errorf("old holder issued %d, at or above the successor's first ID %d", top, first)
		}
		if sb := SFInfoInt(t, successor, "snowflake_start_bound_ms"); ms(top) >= sb {
			t.Errorf("old holder issued in ms %d, not below the bound %d the successor started above", ms(top), sb)
		}
	}
	if len(more) > 0 && slices.Min(more) <= first {
		t.Errorf("successor not increasing: %d after %d", slices.Min(more), first)
	}
	ids := NewIDSet()
	ids.Add("old", oldIDs...)
	ids.Add("successor", append(slices.Clone(more), first)...)
	ids.Check(t, 200)
	// The refusal can reach the client before the holder logs why: wait for the line.
	if _, err := old.waitLine(func(m map[string]any) bool {
		msg, _ := m["msg"].(string)
		return strings.Contains(msg, "worker id lost")
	}, 20*time.Second); err != nil {
		t.Errorf("old holder's log does not say the worker id was lost (%v):\n%s", err, Tail(old.Log(), 40))
	}
}

// DrainUntilNoWorker draws IDS.SNOWFLAKE 20 from c until a NOWORKER reply (noWorker true)
// or timeout, and returns every ID served and the last error. It is how a woken, fenced
// holder is read out: it may serve up to the bound it had persisted, then must refuse.
func DrainUntilNoWorker(c *redis.Client, timeout time.Duration) (ids []int64, noWorker bool, lastErr error) {
	ctx := context.Background()
	for end := time.Now().Add(timeout); time.Now().Before(end); {
		v, err := c.Do(ctx, "IDS.SNOWFLAKE", 20).Int64Slice()
		if err == nil {
			ids = append(ids, v...)
			continue
		}
		lastErr = err
		if strings.HasPrefix(err.Error(), "NOWORKER ") {
			return ids, true, err
		}
		time.Sleep(5 * time.Millisecond) // pacing: retry after an error that is not NOWORKER
	}
	return ids, false, lastErr
}
