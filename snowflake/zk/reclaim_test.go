package zk

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// TestZKReclaimOwnIDWithdrawsOutagePermit: a holder P that lost its id re-claims it in the same
// process, its token still in the state node, so the claim adds no tolerance to the bound and
// announces tolerance 0. That write may be applied though its reply is lost; if P's data dir
// still allowed an outage start on the old tolerance, P would serve up to its old confirmed
// bound plus the tolerance while a third process starts at the claim's bound (duplicate IDs on
// both). So the data dir must record tolerance 0 before the claim is sent: the test reads it at
// that moment.
func TestZKReclaimOwnIDWithdrawsOutagePermit(t *testing.T) {
	addr := zkServer(t)
	name := randomName(t)
	const ident = "10.24.9.9:6380"

	var phase atomic.Int32
	qReached, qRelease := make(chan struct{}), make(chan struct{})
	dirP := t.TempDir()
	var atReclaim statefile.State
	var reclaimErr error
	reclaimed := make(chan struct{})
	testHookFence = func(id int64) {
		switch phase.Load() {
		case 1: // Q has claimed the live node; it stalls before its fence write
			phase.Store(2)
			close(qReached)
			<-qRelease
		case 3: // P re-claiming its own id: what does its data dir allow now?
			phase.Store(4)
			b, err := os.ReadFile(filepath.Join(dirP, snowflake.LocalStateFile))
			if err == nil {
				err = json.Unmarshal(b, &atReclaim)
			}
			reclaimErr = err
			close(reclaimed)
		}
	}
	t.Cleanup(func() { testHookFence = nil })

	pxP := e2e.StartProxy(t, addr)
	cfgP := zkCfg(pxP.Addr(), name, ident, dirP)
	cfgP.OutageTolerance = 30 * time.Second
	srcP := newZK(t, cfgP)
	gP, err := snowflake.New(snowflake.Config{}, srcP, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gP.Close() })
	waitReady(t, gP)
	if _, err := gP.Next(); err != nil { // issue, so the data dir holds the tolerance
		t.Fatal(err)
	}

	// P cut off until its session expires; Q (same identity, its own data dir) claims the live
	// node and stalls before its fence write.
	pxP.SetMode(e2e.ProxyReset, 0)
	pxQ := e2e.StartProxy(t, addr)
	cfgQ := zkCfg(pxQ.Addr(), name, ident, t.TempDir())
	cfgQ.OutageTolerance = 30 * time.Second
	srcQ := newZK(t, cfgQ)
	phase.Store(1)
	qDone := make(chan struct{})
	go func() {
		defer close(qDone)
		for phase.Load() < 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = srcQ.Acquire(ctx) // fails with "held" while P's session lives
			cancel()
			if phase.Load() < 2 {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	select {
	case <-qReached:
	case <-time.After(30 * time.Second):
		t.Fatal("Q never claimed the live node")
	}
	pxQ.SetMode(e2e.ProxyReset, 0) // Q's session will expire
	pxP.SetMode(e2e.ProxyPass, 0)  // P reconnects, finds its live node taken: lost
	for end := time.Now().Add(20 * time.Second); srcP.lostErr() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("P never lost its id: %s", gP.Info().Status)
		}
	}
	phase.Store(3)
	close(qRelease)
	<-qDone
	select {
	case <-reclaimed:
	case <-time.After(30 * time.Second):
		t.Fatalf("P did not re-claim its id: %s", gP.Info().Status)
	}
	if reclaimErr != nil {
		t.Fatal(reclaimErr)
	}
	if atReclaim.Source != "zookeeper" {
		t.Fatalf("data dir at the re-claim: %+v", atReclaim)
	}
	if atReclaim.ToleranceMs != 0 {
		t.Fatalf("data dir at the re-claim still allows an outage start %dms past %v; want tolerance 0 before the claim (which announces 0) is sent",
			atReclaim.ToleranceMs, time.UnixMilli(atReclaim.ZKConfirmedMs))
	}
}
