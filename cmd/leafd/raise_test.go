package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/leafd/leafd/internal/testkit"
)

// fakeInstance answers the admin tools' questions as a leafd whose IDS.TAGS lists tags that
// IDS.INFO then answers with info (a missing tag: the error reply notFound).
func fakeInstance(t *testing.T, marks map[string]int64, tags []string, hwm map[string]int64, notFound string) string {
	t.Helper()
	ln := testkit.Listen(t)
	go func() {
		_ = redcon.Serve(ln, func(c redcon.Conn, cmd redcon.Command) {
			switch strings.ToUpper(string(cmd.Args[0])) {
			case "IDS.MARKS":
				c.WriteArray(2)
				c.WriteBulkString("0")
				c.WriteArray(2 * len(marks))
				for k, v := range marks {
					c.WriteBulkString(k)
					c.WriteInt64(v)
				}
			case "IDS.TAGS":
				c.WriteArray(2)
				c.WriteBulkString("0")
				c.WriteArray(len(tags))
				for _, tg := range tags {
					c.WriteBulkString(tg)
				}
			case "IDS.INFO":
				m, ok := hwm[string(cmd.Args[1])]
				if !ok {
					c.WriteError(notFound)
					return
				}
				c.WriteArray(2)
				c.WriteBulkString("high_water_mark")
				c.WriteInt64(m)
			default:
				c.WriteError("ERR unknown command")
			}
		}, nil, nil)
	}()
	return ln.Addr().String()
}

func TestInstanceMarksSkipsDroppedTags(t *testing.T) {
	ctx := context.Background()
	addr := fakeInstance(t, map[string]int64{"gone": 700, "held": 5}, []string{"gone", "held"},
		map[string]int64{"held": 90}, "NOTAG tag 'gone' does not exist")
	got, err := instanceMarks(ctx, addr, "", 5*time.Second)
	if err != nil {
		t.Fatalf("a tag dropped between IDS.TAGS and IDS.INFO: %v", err)
	}
	if got["gone"] != 700 || got["held"] != 90 || len(got) != 2 {
		t.Fatalf("marks %v, want gone 700 (its durable mark) and held 90 (its high_water_mark)", got)
	}

	// Any other error of IDS.INFO stays an error: the instance's marks are not known.
	addr = fakeInstance(t, nil, []string{"busy"}, nil, "UNAVAILABLE store unreachable")
	if _, err := instanceMarks(ctx, addr, "", 5*time.Second); err == nil || !strings.Contains(err.Error(), "UNAVAILABLE") {
		t.Fatalf("IDS.INFO refused with UNAVAILABLE: err %v, want it reported", err)
	}
}
