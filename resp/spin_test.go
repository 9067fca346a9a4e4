//go:build linux

package resp

import (
	"fmt"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testkit"
)

// pingOnce sends one PING on a new connection and reads its PONG.
func pingOnce(t *testing.T, addr string) {
	t.Helper()
	nc, r := dial(t, addr)
	fmt.Fprint(nc, "PING\r\n")
	if line, err := r.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("PING: got %q, %v", line, err)
	}
}

func pongHandler() Handler {
	return HandlerFunc(func(c *Conn, args [][]byte) { c.WriteSimple("PONG") })
}

// TestLoopSpinsAfterWork: after a round with work the loop polls on instead of parking, for
// as long as LoopSpin. With an hour, it makes a thousand empty polls after a reply without
// parking once; then Shutdown still stops it (its wake ends the spin). Fails when the spin is
// gone (no empty polls) or starts only on an idle loop.
func TestLoopSpinsAfterWork(t *testing.T) {
	srv, addr := startLoopServer(t, Config{LoopSpin: time.Hour}, pongHandler())
	lp := loopsOf(t, srv)[0]
	pingOnce(t, addr)
	parks, spins := lp.parks.Load(), lp.spins.Load()
	if !testkit.Poll(5*time.Second, func() bool { return lp.spins.Load()-spins >= 1000 }) {
		t.Fatalf("%d empty polls in 5 s after a reply, want the loop to spin", lp.spins.Load()-spins)
	}
	if got := lp.parks.Load(); got != parks {
		t.Errorf("the loop parked %d times while it should spin", got-parks)
	}
	pingOnce(t, addr) // a spinning loop serves as before
}

// sweeps100ms makes a loop's park end every 100 ms (the write timeout's sweep), so that a
// test sees it return from idle parks.
const sweeps100ms = 400 * time.Millisecond

// TestLoopSpinEnds: the spin is bounded and follows work only: with LoopSpin at 2 ms the loop
// spins after a reply, then parks, and a park that ends with nothing to do (the sweep's
// timeout) is followed by another park, not by a spin. Fails when the spin never ends (the
// loop would burn its core while idle) or when an idle loop spins after each sweep.
func TestLoopSpinEnds(t *testing.T) {
	srv, addr := startLoopServer(t, Config{LoopSpin: 2 * time.Millisecond, WriteTimeout: sweeps100ms}, pongHandler())
	lp := loopsOf(t, srv)[0]
	spins := lp.spins.Load()
	pingOnce(t, addr)
	parks := lp.parks.Load()
	if !testkit.Poll(5*time.Second, func() bool { return lp.parks.Load() > parks }) {
		t.Fatal("the loop has not parked 5 s after its last reply (LoopSpin 2ms)")
	}
	idle := lp.spins.Load()
	if idle == spins {
		t.Error("the loop parked without spinning first")
	}
	parks = lp.parks.Load()
	if !testkit.Poll(5*time.Second, func() bool { return lp.parks.Load() >= parks+2 }) {
		t.Fatal("the idle loop did not park again after its sweeps")
	}
	if got := lp.spins.Load(); got != idle {
		t.Errorf("the idle loop spun %d times between parks that found nothing", got-idle)
	}
}

// TestLoopSpinOff: a negative LoopSpin parks at once: the loop parks after a reply without
// one empty poll in between.
func TestLoopSpinOff(t *testing.T) {
	srv, addr := startLoopServer(t, Config{LoopSpin: -1, WriteTimeout: sweeps100ms}, pongHandler())
	lp := loopsOf(t, srv)[0]
	pingOnce(t, addr)
	parks := lp.parks.Load()
	if !testkit.Poll(5*time.Second, func() bool { return lp.parks.Load() > parks }) {
		t.Fatal("the loop has not parked 5 s after its last reply")
	}
	if got := lp.spins.Load(); got != 0 {
		t.Errorf("%d empty polls with LoopSpin off, want 0", got)
	}
}
