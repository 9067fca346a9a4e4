package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/internal/testkit"
	"go.uber.org/zap"
)

// With snowflake on, /readyz needs a worker id and a held lease: once the clock is past the
// lease bound (its extension failing, say), Next refuses, and so does readiness, although
// the segment store answers; leafd_ready agrees.
func TestReadyNeedsSnowflakeLease(t *testing.T) {
	var skew atomic.Int64 // added to the handler's clock
	ts := startServer(t, serverOpts{autoCreate: true, config: func(c *handlers.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	}})
	a := New(Config{}, ts.h, zap.NewNop())
	hs := httptest.NewServer(a.Handler())
	t.Cleanup(hs.Close)
	check := func(wantStatus int, wantLease bool) {
		t.Helper()
		status, _, body := testkit.Fetch(t, hs, http.MethodGet, "/readyz")
		var rep readyReport
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatal(err)
		}
		if status != wantStatus || rep.Snowflake == nil || rep.Snowflake.HasLease != wantLease || !rep.Store {
			t.Errorf("readyz: got %d %s, want %d with has_lease %v and the store answering", status, body, wantStatus, wantLease)
		}
		if got := a.readyReport().Ready; got != (wantStatus == http.StatusOK) {
			t.Errorf("readyReport (leafd_ready) %v disagrees with /readyz %d", got, status)
		}
	}
	check(http.StatusOK, true)
	until := ts.snow.Info().ReservedUntil
	if until.IsZero() {
		t.Fatal("snowflake holds no lease")
	}
	skew.Store(int64(time.Until(until) + time.Hour)) // the clock is past the bound (and any extension meanwhile)
	check(http.StatusServiceUnavailable, false)
	skew.Store(0)
	check(http.StatusOK, true)
}
