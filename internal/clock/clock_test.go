package clock

import (
	"testing"
	"time"
)

func TestFakeSleepAdvancesUnlessFrozen(t *testing.T) {
	c := NewFakeMs(1000)
	c.Sleep(5 * time.Millisecond)
	if got := c.Now().UnixMilli(); got != 1005 {
		t.Fatalf("after Sleep(5ms): %d, want 1005", got)
	}
	c.SetFrozen(true)
	c.Sleep(5 * time.Millisecond)
	if got := c.Now().UnixMilli(); got != 1005 {
		t.Fatalf("frozen: %d, want 1005", got)
	}
	if s := c.Sleeps(); len(s) != 2 {
		t.Fatalf("recorded %v, want two sleeps", s)
	}
	c.ResetSleeps()
	if s := c.Sleeps(); len(s) != 0 {
		t.Fatalf("after ResetSleeps: %v", s)
	}
}

func TestFakeTimerFiresOnFakeTime(t *testing.T) {
	c := NewFakeMs(0)
	tm := c.NewTimer(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("fired before the fake time reached it")
	default:
	}
	c.Add(time.Hour)
	select {
	case got := <-tm.C():
		if got.UnixMilli() != time.Hour.Milliseconds() {
			t.Fatalf("fired at %v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not fire when the fake time reached its deadline")
	}
	if tm.Stop() {
		t.Fatal("Stop after firing returned true")
	}
}

func TestFakeTimerFiresOnRealTimeAtTheLatest(t *testing.T) {
	c := NewFakeMs(0)
	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(10 * time.Second):
		t.Fatal("a fake timer must also fire after its duration of real time")
	}
}

func TestFakeTimerStop(t *testing.T) {
	c := NewFakeMs(0)
	tm := c.NewTimer(time.Hour)
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	c.Add(2 * time.Hour)
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	default:
	}
}

func TestRealSleepIsAtLeastD(t *testing.T) {
	var r Real
	start := time.Now()
	r.Sleep(2 * time.Millisecond)
	if el := time.Since(start); el < 2*time.Millisecond {
		t.Fatalf("slept %v, want at least 2ms", el)
	}
	tm := r.NewTimer(time.Millisecond)
	<-tm.C()
}

func TestFakeAfterFiresOnFakeTime(t *testing.T) {
	c := NewFakeMs(0)
	ch := c.After(time.Hour)
	c.Add(time.Hour)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("After did not fire when the fake time reached its deadline")
	}
}

// Timers fire in deadline order as the fake time reaches each one, whatever the order they
// were made in, after a Stop of the earliest and after the time went backwards.
func TestFakeTimersFireAtEachDeadline(t *testing.T) {
	c := NewFakeMs(0)
	fired := func(tm Timer) bool {
		select {
		case <-tm.C():
			return true
		default:
			return false
		}
	}
	h3, h1, h2 := c.NewTimer(3*time.Hour), c.NewTimer(time.Hour), c.NewTimer(2*time.Hour)
	early := c.NewTimer(30 * time.Minute)
	if !early.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	c.Add(time.Hour)
	if !fired(h1) || fired(h2) || fired(h3) {
		t.Fatal("at 1h: want only the 1h timer fired")
	}
	c.Add(-time.Hour)
	c.Add(90 * time.Minute)
	if fired(h2) || fired(h3) {
		t.Fatal("at 1h30: want nothing more fired")
	}
	c.Add(30 * time.Minute)
	if !fired(h2) || fired(h3) {
		t.Fatal("at 2h: want the 2h timer fired, not the 3h one")
	}
	h25 := c.NewTimer(30 * time.Minute)
	c.Add(30 * time.Minute)
	if !fired(h25) || fired(h3) {
		t.Fatal("at 2h30: want the timer made at 2h for 30m fired, not the 3h one")
	}
	c.Set((3 * time.Hour).Milliseconds())
	if !fired(h3) {
		t.Fatal("at 3h: want the 3h timer fired")
	}
	if fired(early) {
		t.Fatal("the stopped timer fired")
	}
}
