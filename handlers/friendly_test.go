package handlers

import (
	"context"
	"regexp"
	"testing"
)

// IDS.SNOWFLAKE FRIENDLY gives yyyyMMddHHmmssSSS-worker-sequence strings; IDS.DECODE reads
// them and the integers alike, and reports both forms.
func TestSnowflakeFriendly(t *testing.T) {
	forEachProto(t, func(t *testing.T, proto int) {
		s := startServer(t, serverOpts{})
		c := s.client(t, proto, "")
		ctx := context.Background()
		form := regexp.MustCompile(`^20\d{15}-7-\d{1,4}$`)
		one, err := c.Do(ctx, "IDS.SNOWFLAKE", "FRIENDLY").Text()
		if err != nil || !form.MatchString(one) {
			t.Fatalf("IDS.SNOWFLAKE FRIENDLY: got %q, %v", one, err)
		}
		many, err := c.Do(ctx, "IDS.SNOWFLAKE", 5, "friendly").StringSlice()
		if err != nil || len(many) != 5 {
			t.Fatalf("IDS.SNOWFLAKE 5 FRIENDLY: got %v, %v", many, err)
		}
		for _, f := range many {
			d := flatMap(t, c.Do(ctx, "IDS.DECODE", f).Val())
			if d["friendly"] != f || d["worker_id"] != "7" {
				t.Fatalf("IDS.DECODE %s: got %v", f, d)
			}
			d2 := flatMap(t, c.Do(ctx, "IDS.DECODE", d["id"]).Val())
			if d2["friendly"] != f || d2["timestamp_ms"] != d["timestamp_ms"] || d2["sequence"] != d["sequence"] {
				t.Fatalf("IDS.DECODE %s: got %v; from the friendly form %v", d["id"], d2, d)
			}
		}
		wantErr(t, c.Do(ctx, "IDS.DECODE", "20261301152415876-7-1").Err(), "ERR not a snowflake ID")
		wantErr(t, c.Do(ctx, "IDS.SNOWFLAKE", 1, 2, "FRIENDLY").Err(), "ERR syntax")
	})
}
