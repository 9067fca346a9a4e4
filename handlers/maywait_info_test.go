package handlers

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/segment"
)

// gateShapes is a shape store whose LoadShape, once armed, waits until the test releases
// it: a store read that stalls.
type gateShapes struct {
	segment.Shapes
	entered chan struct{}
	release chan struct{}
}

func (g *gateShapes) LoadShape(ctx context.Context, tag string) ([]byte, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Shapes.LoadShape(ctx, tag)
}

// TestInfoReadsShapesOffLoop: IDS.INFO of a tag this instance neither holds nor knows as
// shaped or ordered reads the shape store, so it runs off the event loop: while the read
// stalls, another client of the same loop is served and the loop's watchdog never had to take
// the loop over. IDS.INFO of a held tag stays on the loop. Fails without IDS.INFO's mayWait
// flag (the read then holds every connection of the loop until the watchdog).
func TestInfoReadsShapesOffLoop(t *testing.T) {
	g := &gateShapes{entered: make(chan struct{}, 4), release: make(chan struct{})}
	ts := startServer(t, serverOpts{autoCreate: true, shapes: true, loops: 1,
		config: func(c *Config) { g.Shapes = c.Shapes; c.Shapes = g }})
	var once sync.Once
	free := func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(free) // before the server's shutdown (cleanups run last first)
	a := ts.raw(t)
	ar := bufio.NewReader(a)
	fmt.Fprint(a, "INCR held\r\nIDS.INFO held\r\n")
	if line, err := ar.ReadString('\n'); err != nil || line[0] != ':' {
		t.Fatalf("INCR held: %q, %v", line, err)
	}
	if line, err := ar.ReadString('\n'); err != nil || !strings.HasPrefix(line, "*") {
		t.Fatalf("IDS.INFO held: %q, %v", line, err)
	}
	for range 12 * 2 { // the map's 12 fields, two lines each (both segments are maps or null)
		skipReply(t, ar)
	}
	st0 := ts.srv.Stats()
	if st0.LoopOffloads != 1 { // the INCR that loaded the tag's first segment
		t.Fatalf("LoopOffloads %d after INCR and IDS.INFO of a held tag, want 1 (the first load)", st0.LoopOffloads)
	}
	fmt.Fprint(a, "IDS.INFO unseen\r\n")
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("IDS.INFO of an unseen tag never read the shape store")
	}
	b := ts.raw(t)
	br := bufio.NewReader(b)
	fmt.Fprint(b, "PING\r\n")
	if line, err := br.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+PONG" {
		t.Fatalf("other client while IDS.INFO reads the store: %q, %v", line, err)
	}
	st := ts.srv.Stats()
	free()
	if n := st.LoopTakeovers - st0.LoopTakeovers; n != 0 {
		t.Errorf("the watchdog took the loop over %d times: IDS.INFO read the shape store on the loop", n)
	}
	if n := st.LoopOffloads - st0.LoopOffloads; n != 1 {
		t.Errorf("LoopOffloads +%d, want +1 (IDS.INFO of the unseen tag)", n)
	}
	if line, err := ar.ReadString('\n'); err != nil || !strings.HasPrefix(line, "-NOTAG") {
		t.Errorf("IDS.INFO unseen: %q, %v; want NOTAG", line, err)
	}
}
