package main

// The phases the ordered-tag scenarios share: a load warmed up on every instance, then a
// fault applied to the leader while the others keep serving.

import (
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// startWarmLoad starts the linearizability load of tag seq on every instance of ls (three
// clients each) and waits until each has served 300 IDs; what names the phase.
func startWarmLoad(t *testing.T, ls []*e2e.Leafd, what string) *linLoad {
	t.Helper()
	load := startLinLoad(t, "seq", ls, 3)
	for i := range ls {
		load.served(t, i, 300, 20*time.Second, what)
	}
	return load
}

// faultLeader applies fault to the leader of seq and waits until every other instance has
// served 300 more IDs of load; what names the phase. It returns the leader and when the
// fault began.
func faultLeader(t *testing.T, ls []*e2e.Leafd, load *linLoad, fault func(lead int), what string) (int, time.Time) {
	t.Helper()
	lead := leaderOf(t, ls, nil, "seq", 10*time.Second)
	at := time.Now()
	fault(lead)
	for _, i := range others(len(ls), lead) {
		load.served(t, i, 300, 20*time.Second, what)
	}
	return lead, at
}
