package handlers

import (
	"bufio"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"go.uber.org/zap"
)

// mayRecorder runs the handler and records, before each command, what MayBlock answers for
// it on that connection in its current state.
type mayRecorder struct {
	h    *Handler
	mu   sync.Mutex
	last map[string]bool // client address -> MayBlock of its latest command
}

func (r *mayRecorder) ServeRESP(c *resp.Conn, args [][]byte) {
	may := r.h.MayBlock(c, args)
	r.mu.Lock()
	r.last[c.Info(time.Now()).Addr] = may
	r.mu.Unlock()
	r.h.ServeRESP(c, args)
}

func (r *mayRecorder) MayBlock(c *resp.Conn, args [][]byte) bool { return r.h.MayBlock(c, args) }

func recordingServer(t *testing.T, o serverOpts) (*testServer, *mayRecorder) {
	rec := &mayRecorder{last: map[string]bool{}}
	o.wrap = func(h *Handler) resp.Handler { rec.h = h; return rec }
	o.loops = 1
	return startServer(t, o), rec
}

// mayClient sends one inline command at a time and reports MayBlock's answer for it.
type mayClient struct {
	t    *testing.T
	rec  *mayRecorder
	r    *bufio.Reader
	w    func(string)
	addr string // the client's address as the server sees it
}

func newMayClient(t *testing.T, ts *testServer, rec *mayRecorder) *mayClient {
	nc := ts.raw(t)
	return &mayClient{t: t, rec: rec, r: bufio.NewReader(nc), w: func(s string) { fmt.Fprint(nc, s) },
		addr: nc.LocalAddr().String()}
}

// skipReply reads one RESP2/RESP3 reply, nested ones included.
func skipReply(t *testing.T, r *bufio.Reader) {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil || len(line) < 3 {
		t.Fatalf("reply: %q, %v", line, err)
	}
	var n int
	switch line[0] {
	case '$', '=':
		fmt.Sscanf(line[1:], "%d", &n)
		if n >= 0 {
			if _, err := r.Discard(n + 2); err != nil {
				t.Fatal(err)
			}
		}
	case '*', '~', '>':
		fmt.Sscanf(line[1:], "%d", &n)
		for i := 0; i < n; i++ {
			skipReply(t, r)
		}
	case '%':
		fmt.Sscanf(line[1:], "%d", &n)
		for i := 0; i < 2*n; i++ {
			skipReply(t, r)
		}
	}
}

// may sends cmd, reads its reply and returns MayBlock's answer for it.
func (m *mayClient) may(cmd string) bool {
	m.t.Helper()
	m.rec.mu.Lock()
	delete(m.rec.last, m.addr)
	m.rec.mu.Unlock()
	m.w(cmd + "\r\n")
	skipReply(m.t, m.r)
	m.rec.mu.Lock()
	defer m.rec.mu.Unlock()
	may, ok := m.rec.last[m.addr]
	if !ok {
		m.t.Fatalf("%q: the handler never saw it", cmd)
	}
	return may
}

// TestMayBlockSegmentWaits: INCR, INCRBY and IDS.SEGMENT of a tag with no segment in memory
// (they would wait for a load) run off the event loop; once the tag's segment holds the
// values they need they run on it. Fails when the table's flags ignore the segment's state
// (the loop would then stall its other connections until the watchdog, 10-20 ms per waiting
// request).
func TestMayBlockSegmentWaits(t *testing.T) {
	ts, rec := recordingServer(t, serverOpts{autoCreate: true, noWarm: true})
	m := newMayClient(t, ts, rec)
	for _, cmd := range []string{"INCR cold1", "incrby cold2 5", "IDS.SEGMENT cold3", "ids.segment cold4 10"} {
		if !m.may(cmd) {
			t.Errorf("%q on a tag not loaded: MayBlock false, want true", cmd)
		}
	}
	for _, cmd := range []string{"INCR cold1", "INCRBY cold1 5", "IDS.SEGMENT cold1", "IDS.SEGMENT cold1 10"} {
		if m.may(cmd) {
			t.Errorf("%q with a segment in memory: MayBlock true, want false", cmd)
		}
	}
	// More than the segment holds (the default step is 1000) would wait for the next one.
	if !m.may("INCRBY cold1 5000") {
		t.Errorf("INCRBY past the segment: MayBlock false, want true")
	}
	// Malformed counts and arities are answered by the command itself, on the loop.
	for _, cmd := range []string{"INCRBY cold1 x", "INCRBY cold1 0", "IDS.SEGMENT cold1 -1", "IDS.SEGMENT cold9 1 2", "INCR", "INCR a b", "GET cold9"} {
		if m.may(cmd) {
			t.Errorf("%q: MayBlock true, want false", cmd)
		}
	}
}

// TestMayBlockTable: the flags of the other commands, and the state MayBlock reads as
// ServeRESP does: inside MULTI a command is only queued (it never waits), and EXEC waits
// exactly when a command it queued may (else EXEC runs its queue on the loop). Fails when
// EXEC's flag is dropped or does not ask its queue.
func TestMayBlockTable(t *testing.T) {
	ts, rec := recordingServer(t, serverOpts{autoCreate: true, noWarm: true})
	m := newMayClient(t, ts, rec)
	for cmd, want := range map[string]bool{
		"PING": false, "TIME": false, "IDS.SNOWFLAKE": false, "IDS.MARKS": true,
		"IDS.CREATE made": true, "AUTH default x": true, "HELLO 3": false,
		"HELLO 2 AUTH default x": true, "HELLO 2 SETNAME me": false,
	} {
		if got := m.may(cmd); got != want {
			t.Errorf("%q: MayBlock %v, want %v", cmd, got, want)
		}
	}
	m.may("INCR warm") // loaded
	for _, tc := range []struct {
		queue []string
		want  bool
	}{
		{[]string{"INCR warm", "PING"}, false},
		{[]string{"INCR warm", "INCR fresh"}, true},
		{[]string{"PING", "AUTH default x"}, true},
		{[]string{"IDS.SEGMENT warm 3", "INCRBY warm 2"}, false},
		{pings(maxExecOnLoop), false},
		{pings(maxExecOnLoop + 1), true}, // long: off the loop whatever it holds
	} {
		if m.may("MULTI") {
			t.Error("MULTI: MayBlock true")
		}
		for _, q := range tc.queue {
			if m.may(q) {
				t.Errorf("%q inside MULTI (queued only): MayBlock true, want false", q)
			}
		}
		if got := m.may("EXEC"); got != tc.want {
			t.Errorf("EXEC of %q: MayBlock %v, want %v", tc.queue, got, tc.want)
		}
	}
	if m.may("EXEC") {
		t.Error("EXEC without MULTI: MayBlock true, want false")
	}
}

func pings(n int) []string {
	p := make([]string, n)
	for i := range p {
		p[i] = "PING"
	}
	return p
}

// TestMayBlockBeforeAuth: a command refused with NOAUTH is answered at once (an
// unauthenticated client cannot make the server start goroutines with INCRs of new tags).
func TestMayBlockBeforeAuth(t *testing.T) {
	ts, rec := recordingServer(t, serverOpts{autoCreate: true, noWarm: true, requirePass: "pw"})
	m := newMayClient(t, ts, rec)
	if m.may("INCR cold") {
		t.Error("INCR before AUTH (NOAUTH): MayBlock true, want false")
	}
	if !m.may("AUTH pw") {
		t.Error("AUTH: MayBlock false, want true")
	}
	if !m.may("INCR cold") {
		t.Error("INCR of a new tag after AUTH: MayBlock false, want true")
	}
}

// TestExecWaitsOffLoop: a transaction whose queued AUTH waits for its pacing turn runs off
// the event loop: while it waits, another client of the same loop is served, and the loop's
// watchdog never had to take the loop over (resp.Stats.LoopTakeovers). Fails on EXEC run on
// the loop (the other connections then stall until the watchdog, and innocent throughput
// falls several-fold with queued wrong AUTHs).
func TestExecWaitsOffLoop(t *testing.T) {
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	ts := startServer(t, serverOpts{requirePass: "pw", loops: 1, config: func(c *Config) {
		c.AuthFailRate, c.AuthFailBurst = 1, 1 // the second failure waits for its turn
		c.Sleep = func(time.Duration) { entered <- struct{}{}; <-release }
	}})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the server's shutdown (cleanups run last first)
	a := ts.raw(t)
	ar := bufio.NewReader(a)
	fmt.Fprint(a, "AUTH pw\r\nMULTI\r\nAUTH default bad\r\nAUTH default bad\r\n")
	for i, want := range []string{"+OK", "+OK", "+QUEUED", "+QUEUED"} {
		if line, err := ar.ReadString('\n'); strings.TrimSpace(line) != want {
			t.Fatalf("reply %d: %q, %v; want %s", i, line, err, want)
		}
	}
	fmt.Fprint(a, "EXEC\r\n")
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the queued AUTH never waited for its turn")
	}
	b := ts.raw(t)
	br := bufio.NewReader(b)
	fmt.Fprint(b, "AUTH pw\r\nPING\r\n")
	for _, want := range []string{"+OK", "+PONG"} {
		if line, err := br.ReadString('\n'); strings.TrimSpace(line) != want {
			t.Fatalf("other client while EXEC waits: %q, %v; want %s", line, err, want)
		}
	}
	st := ts.srv.Stats()
	free()
	if st.LoopTakeovers != 0 {
		t.Errorf("the watchdog took the loop over %d times: EXEC ran its waiting queue on the loop", st.LoopTakeovers)
	}
	if st.LoopOffloads == 0 {
		t.Error("nothing ran off the loop")
	}
	if line, err := ar.ReadString('\n'); strings.TrimSpace(line) != "*2" {
		t.Fatalf("EXEC: %q, %v", line, err)
	}
	for i := 0; i < 2; i++ {
		if line, _ := ar.ReadString('\n'); !strings.HasPrefix(line, "-WRONGPASS") {
			t.Errorf("EXEC element %d: %q, want WRONGPASS", i, line)
		}
	}
}

// TestUnavailableWords: UNAVAILABLE says what the request waited for when the segment core
// knows it (segment.TagError.Waited), and the old words only when it does not.
func TestUnavailableWords(t *testing.T) {
	h := New(Config{}, nil, nil, zap.NewNop())
	for waited, want := range map[string]string{
		"waited 2s for a free loader: its load is still queued, 9 loads in the queues": "UNAVAILABLE no segment ready for tag 'hot' (waited 2s for a free loader: its load is still queued, 9 loads in the queues); retry later",
		"": "UNAVAILABLE no segment ready for tag 'hot' (store unreachable or slow); retry later",
	} {
		err := &segment.TagError{Tag: "hot", Err: segment.ErrUnavailable, Detail: "raw: dial tcp 10.0.0.1", Waited: waited}
		if got := h.errorReply(err); got != want {
			t.Errorf("waited %q: got %q, want %q", waited, got, want)
		}
	}
}

// TestNotAdmittedWords: a tag refused because the store could not tell whether it is ordered
// is not called ordered; one refused because another instance leads it is.
func TestNotAdmittedWords(t *testing.T) {
	h := New(Config{}, nil, nil, zap.NewNop())
	for cause, want := range map[error]string{
		fmt.Errorf("%w: %q: context deadline exceeded", ordered.ErrUnknownOrder, "abc"): "UNAVAILABLE could not tell whether tag 'abc' is ordered (the store did not answer in time; see the server log); retry later",
		fmt.Errorf("%w: %q", ordered.ErrNotLeader, "abc"):                               "UNAVAILABLE tag 'abc' is ordered and cannot be served by this instance now (see the server log); retry later",
	} {
		err := &segment.TagError{Tag: "abc", Err: fmt.Errorf("%w: %w", segment.ErrNotAdmitted, cause)}
		if got := h.errorReply(err); got != want {
			t.Errorf("%v: got %q, want %q", cause, got, want)
		}
	}
}
