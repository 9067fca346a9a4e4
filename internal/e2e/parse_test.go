package e2e

import "testing"

// TestParseLine: the ready line is found in both log formats, with its fields.
func TestParseLine(t *testing.T) {
	for _, in := range []string{
		"2026-11-30T23:22:53.706Z\tINFO\tleafd/run.go:147\tleafd ready\t{\"addr\": \"127.0.0.1:35857\", \"store\": \"embedded\"}",
		`{"level":"info","ts":1,"caller":"leafd/run.go:147","msg":"leafd ready","addr":"127.0.0.1:35857"}`,
		"2026-11-30T23:24:28.692Z\tINFO\tnamed\tleafd/run.go:147\tleafd ready\t{\"addr\": \"127.0.0.1:35857\"}",
	} {
		if m := parseLine([]byte(in)); m["msg"] != ReadyMsg || m["addr"] != "127.0.0.1:35857" {
			t.Errorf("%q: got %v, want the ready line with its addr", in, m)
		}
	}
	if m := parseLine([]byte("2026\tINFO\tx/y.go:1\tstopped")); m["msg"] != "stopped" {
		t.Errorf("a line without fields: got %v", m)
	}
	if m := parseLine([]byte("WARNING: DATA RACE")); m != nil {
		t.Errorf("a line that is not zap's: got %v, want nil", m)
	}
}
