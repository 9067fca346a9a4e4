package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// TestOrderedPortZeroAdvertised: instances on MySQL started with --addr 127.0.0.1:0 and no
// --advertise-addr advertise the port they bound, so that a follower forwards an ordered
// tag's commands to the leader (the address "127.0.0.1:0" would reach no one).
func TestOrderedPortZeroAdvertised(t *testing.T) {
	t.Parallel()
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	a := e2e.Start(t, orderedArgs(dsn, "--addr", "127.0.0.1:0")...)
	line := a.WaitLog("ordered tags: leader lease", 5*time.Second)
	if line["advertise_addr"] != a.Addr {
		t.Fatalf("advertised %v, want the bound address %s", line["advertise_addr"], a.Addr)
	}
	createOrdered(t, a, "po", 10)
	if _, err := a.Incr("po"); err != nil { // a takes the lease
		t.Fatal(err)
	}
	b := e2e.Start(t, orderedArgs(dsn, "--addr", "127.0.0.1:0")...)
	prev := int64(0)
	for i := range 20 {
		l := []*e2e.Leafd{a, b}[i%2]
		v, err := l.Incr("po")
		if err != nil {
			t.Fatalf("INCR po on %s: %v", l.Addr, err)
		}
		if v <= prev {
			t.Fatalf("INCR po on %s: %d after %d", l.Addr, v, prev)
		}
		prev = v
	}
	info := map[string]any{}
	r, err := b.Do("IDS.INFO", "po")
	if err != nil {
		t.Fatal(err)
	}
	switch v := r.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			info[fmt.Sprint(v[i])] = v[i+1]
		}
	case map[any]any:
		for k, x := range v {
			info[fmt.Sprint(k)] = x
		}
	}
	if info["leader"] != a.Addr || fmt.Sprint(info["leader_here"]) != "0" || fmt.Sprint(info["forwarded"]) == "0" {
		t.Fatalf("IDS.INFO po on the follower: leader %v here %v forwarded %v; want leader %s, not here, some forwarded",
			info["leader"], info["leader_here"], info["forwarded"], a.Addr)
	}
}
