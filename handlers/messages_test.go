package handlers

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// TestMessagesSayWhatToDo: each refusal below says what to do and names the option that
// bounds it (README "Error codes").
func TestMessagesSayWhatToDo(t *testing.T) {
	ctx := context.Background()
	embedded := startServer(t, serverOpts{config: func(c *Config) { c.MaxStep = 1000 }})
	c := embedded.client(t, 2, "")
	mysql := startServer(t, serverOpts{config: func(c *Config) { c.StoreName = "mysql" }})
	m := mysql.client(t, 2, "")
	id, err := c.Do(ctx, "IDS.SNOWFLAKE").Int64()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		err     error
		want    []string
		notWant string
	}{
		// The embedded store has no SQL table: no INSERT INTO leaf_alloc there.
		{"NOTAG embedded", c.Incr(ctx, "nope").Err(), []string{"NOTAG tag 'nope' does not exist", "IDS.CREATE nope", "--auto-create"}, "INSERT INTO"},
		{"NOTAG mysql", m.Incr(ctx, "nope").Err(), []string{"NOTAG", "IDS.CREATE nope", "INSERT INTO leaf_alloc"}, ""},
		{"LIMIT batch", c.Do(ctx, "IDS.SNOWFLAKE", 101).Err(), []string{"LIMIT count must be between 1 and 100", "--max-batch"}, ""},
		{"BADTAG from 1", c.Incr(ctx, "ab\x01").Err(), []string{"BADTAG", "byte 3 (counting from 1) is 0x01"}, ""},
		{"DECODE tiny", c.Do(ctx, "IDS.DECODE", 5).Err(), []string{"ERR 5 is not a snowflake ID", "at least 4194304", "segment IDs"}, ""},
		{"CREATE STEP", c.Do(ctx, "IDS.CREATE", "x", "STEP", 1001).Err(), []string{"LIMIT STEP 1001 is above --max-step (1000)", "raise --max-step"}, ""},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.err.Error(), w) {
				t.Errorf("%s: got %q, want it to contain %q", tc.name, tc.err, w)
			}
		}
		if tc.notWant != "" && strings.Contains(tc.err.Error(), tc.notWant) {
			t.Errorf("%s: got %q, must not contain %q", tc.name, tc.err, tc.notWant)
		}
	}
	// The bounds themselves are accepted.
	if err := c.Do(ctx, "IDS.CREATE", "x", "STEP", 1000).Err(); err != nil {
		t.Errorf("IDS.CREATE x STEP 1000 (= --max-step): %v", err)
	}
	if err := c.Do(ctx, "IDS.DECODE", id).Err(); err != nil {
		t.Errorf("IDS.DECODE %d: %v", id, err)
	}
	if err := c.Do(ctx, "IDS.DECODE", strconv.Itoa(1<<22)).Err(); err != nil {
		t.Errorf("IDS.DECODE 4194304 (time part 1): %v", err)
	}
}

// TestPublicStoreError: /readyz's store_error is plain words, never the driver's text.
func TestPublicStoreError(t *testing.T) {
	for raw, want := range map[string]string{
		"":                                    "",
		"invalid connection":                  "the connection to the store failed or was lost" + seeLog,
		"dial tcp 10.0.0.7:3306: i/o timeout": "the store did not answer in time" + seeLog,
		"regression marks: raising mark of t: disk full":                     "the marks file failed" + seeLog,
		"regression marks: raise t: write marks.db: no space left on device": "the marks file failed: the store's disk is full; free space on the store's disk" + seeLog,
		"Error 1045: Access denied for user 'leaf'":                          "the database refused leafd's user or password (MySQL error 1045); fix the user or password in --mysql-dsn, or the account's allowed host" + seeLog,
		"segment: mysql tags: Error 1049 (42000): Unknown database 'x'":      "the database named in the DSN does not exist (MySQL error 1049); create the database, or fix its name in --mysql-dsn" + seeLog,
		"something else": "store error" + seeLog,
	} {
		if got := publicStoreError(raw); got != want {
			t.Errorf("publicStoreError(%q) = %q, want %q", raw, got, want)
		}
	}
}
