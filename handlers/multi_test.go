package handlers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// step is one command of a transcript and its exact raw reply.
type step struct{ cmd, reply string }

// runTranscript sends each command inline on one connection and compares the raw reply
// byte for byte (an empty expected reply is read, not checked). The replies not involving IDs were taken from redis-server 7.0.15 (7.2 for
// NO-TOUCH), so these tests pin Redis's wording.
func runTranscript(t *testing.T, s *testServer, steps []step) {
	t.Helper()
	conn := s.raw(t)
	r := bufio.NewReader(conn)
	for _, st := range steps {
		if _, err := fmt.Fprintf(conn, "%s\r\n", st.cmd); err != nil {
			t.Fatal(err)
		}
		got, err := readRaw(r)
		if err != nil {
			t.Fatalf("%s: %v", st.cmd, err)
		}
		if st.reply != "" && got != st.reply {
			t.Errorf("%s: got %q, want %q", st.cmd, got, st.reply)
		}
	}
}

// readRaw reads one whole reply and returns its bytes.
func readRaw(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return line, err
	}
	body := strings.TrimSuffix(line[1:], "\r\n")
	switch line[0] {
	case '$', '=', '!':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return line, nil
		}
		b := make([]byte, n+2)
		_, err := io.ReadFull(r, b)
		return line + string(b), err
	case '*', '~', '>', '%', '|':
		n, _ := strconv.Atoi(body)
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			el, err := readRaw(r)
			line += el
			if err != nil {
				return line, err
			}
		}
	}
	return line, nil
}

func TestTransactions(t *testing.T) {
	const execAbort = "-EXECABORT Transaction discarded because of previous errors.\r\n"
	tests := []struct {
		name  string
		steps []step
	}{
		{"exec and discard without multi", []step{
			{"EXEC", "-ERR EXEC without MULTI\r\n"},
			{"DISCARD", "-ERR DISCARD without MULTI\r\n"},
		}},
		{"queue and exec", []step{
			{"MULTI", "+OK\r\n"},
			{"MULTI", "-ERR MULTI calls can not be nested\r\n"},
			{"WATCH x", "-ERR WATCH inside MULTI is not allowed\r\n"},
			{"INCR order", "+QUEUED\r\n"},
			{"IDS.SEGMENT order 2", "+QUEUED\r\n"},
			{`ECHO "a b"`, "+QUEUED\r\n"},
			// Neither the nested MULTI nor WATCH aborts the transaction (as in Redis).
			{"EXEC", "*3\r\n:1\r\n*2\r\n:2\r\n:3\r\n$3\r\na b\r\n"},
			{"EXEC", "-ERR EXEC without MULTI\r\n"},
		}},
		{"empty transaction", []step{{"MULTI", "+OK\r\n"}, {"EXEC", "*0\r\n"}}},
		{"unknown command aborts", []step{
			{"MULTI", "+OK\r\n"},
			{"PING", "+QUEUED\r\n"},
			{"FOO bar", "-ERR unknown command 'FOO', with args beginning with: 'bar' \r\n"},
			{"PING", "+QUEUED\r\n"},
			{"EXEC", execAbort},
			{"PING", "+PONG\r\n"},
		}},
		{"arity error aborts", []step{
			{"MULTI", "+OK\r\n"},
			{"INCR order", "+QUEUED\r\n"},
			{"ECHO", "-ERR wrong number of arguments for 'echo' command\r\n"},
			{"EXEC", execAbort},
			// Nothing ran: the tag starts at 1.
			{"INCR order", ":1\r\n"},
		}},
		{"run-time errors are elements", []step{
			{"MULTI", "+OK\r\n"},
			{"INCR order", "+QUEUED\r\n"},
			{"INCRBY order notnum", "+QUEUED\r\n"},
			{"IDS.SEGMENT order 0", "+QUEUED\r\n"},
			{"INCR order", "+QUEUED\r\n"},
			{"EXEC", "*4\r\n:1\r\n-ERR value is not an integer or out of range\r\n-LIMIT count must be between 1 and 100 (--max-batch); ask for more in several calls or raise --max-batch\r\n:2\r\n"},
		}},
		{"discard", []step{
			{"WATCH x", "+OK\r\n"},
			{"UNWATCH", "+OK\r\n"},
			{"WATCH", "-ERR wrong number of arguments for 'watch' command\r\n"},
			{"MULTI", "+OK\r\n"},
			{"INCR order", "+QUEUED\r\n"},
			{"DISCARD", "+OK\r\n"},
			{"EXEC", "-ERR EXEC without MULTI\r\n"},
			{"INCR order", ":1\r\n"},
		}},
		{"reset leaves multi", []step{
			{"MULTI", "+OK\r\n"},
			{"RESET", "+RESET\r\n"},
			{"EXEC", "-ERR EXEC without MULTI\r\n"},
		}},
		{"client commands are queued", []step{
			{"MULTI", "+OK\r\n"},
			{"CLIENT TRACKING on", "+QUEUED\r\n"},
			{"CLIENT TRACKING x", "+QUEUED\r\n"},
			{"EXEC", "*2\r\n+OK\r\n-ERR syntax error\r\n"},
		}},
		{"quit runs at once", []step{
			{"MULTI", "+OK\r\n"},
			{"QUIT", "+OK\r\n"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runTranscript(t, startServer(t, serverOpts{autoCreate: true}), tt.steps)
		})
	}
}

// TestTransactionNoAuthAborts: a command refused for want of AUTH inside MULTI aborts it.
func TestTransactionNoAuthAborts(t *testing.T) {
	runTranscript(t, startServer(t, serverOpts{autoCreate: true, requirePass: "pw"}), []step{
		{"MULTI", "-NOAUTH Authentication required.\r\n"},
		{"AUTH pw", "+OK\r\n"},
		{"MULTI", "+OK\r\n"},
		{"INCR order", "+QUEUED\r\n"},
		{"RESET", "+RESET\r\n"}, // RESET also logs out
		{"INCR order", "-NOAUTH Authentication required.\r\n"},
	})
}

// TestTransactionTooLarge: the queue is bounded; the command past the bound is refused and
// the transaction aborts.
func TestTransactionTooLarge(t *testing.T) {
	s := startServer(t, serverOpts{autoCreate: true})
	conn := s.raw(t)
	r := bufio.NewReader(conn)
	big := strings.Repeat("x", 512*1024)
	fmt.Fprint(conn, "MULTI\r\n")
	n := 0
	for ; n < 20; n++ {
		fmt.Fprintf(conn, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(big), big)
	}
	fmt.Fprint(conn, "EXEC\r\n")
	var replies []string
	for i := 0; i < n+2; i++ {
		got, err := readRaw(r)
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, got)
	}
	if replies[1] != "+QUEUED\r\n" || !strings.HasPrefix(replies[n], "-LIMIT transaction too large") {
		t.Errorf("got %q ... %q, want QUEUED first and LIMIT last", replies[1], replies[n])
	}
	if replies[n+1] != "-EXECABORT Transaction discarded because of previous errors.\r\n" {
		t.Errorf("EXEC: got %q, want EXECABORT", replies[n+1])
	}
}

// TestTransactionClients: go-redis's TxPipelined (MULTI ... EXEC) in both protocols returns
// the replies of the queued commands.
func TestTransactionClients(t *testing.T) {
	forEachProto(t, func(t *testing.T, proto int) {
		s := startServer(t, serverOpts{autoCreate: true})
		c := s.client(t, proto, "")
		ctx := context.Background()
		var incr *redis.IntCmd
		var seg *redis.Cmd
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			incr = p.Incr(ctx, "order")
			seg = p.Do(ctx, "IDS.SEGMENT", "order", 3)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := seg.Int64Slice()
		if incr.Val() != 1 || !reflect.DeepEqual(got, []int64{2, 3, 4}) {
			t.Errorf("got INCR %d, IDS.SEGMENT %v; want 1, [2 3 4]", incr.Val(), got)
		}
	})
}

func TestClientTracking(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"bcast prefixes", []step{
			{"CLIENT GETREDIR", ":-1\r\n"},
			{"CLIENT TRACKINGINFO", "*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"},
			{"CLIENT TRACKING on BCAST", "+OK\r\n"},
			{"CLIENT TRACKINGINFO", "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*1\r\n$0\r\n\r\n"},
			{"CLIENT TRACKING on BCAST PREFIX a", "-ERR Prefix 'a' overlaps with an existing prefix ''. Prefixes for a single client must not overlap.\r\n"},
			{"CLIENT TRACKING on", "-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.\r\n"},
			{"CLIENT TRACKING off", "+OK\r\n"},
			{"CLIENT TRACKINGINFO", "*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"},
			{"CLIENT TRACKING on BCAST PREFIX a", "+OK\r\n"},
			{"CLIENT TRACKING on BCAST PREFIX a", "-ERR Prefix 'a' overlaps with an existing prefix 'a'. Prefixes for a single client must not overlap.\r\n"},
			{"CLIENT TRACKING on BCAST PREFIX c PREFIX b PREFIX bc", "-ERR Prefix 'b' overlaps with another provided prefix 'bc'. Prefixes for a single client must not overlap.\r\n"},
			{"CLIENT TRACKING on BCAST PREFIX b", "+OK\r\n"},
			{"CLIENT TRACKINGINFO", "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"},
		}},
		{"optin and caching", []step{
			{"CLIENT CACHING yes", "-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n"},
			{"CLIENT TRACKING on OPTIN", "+OK\r\n"},
			{"CLIENT CACHING no", "-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n"},
			{"CLIENT CACHING yes", "+OK\r\n"},
			{"CLIENT TRACKINGINFO", "*6\r\n$5\r\nflags\r\n*3\r\n$2\r\non\r\n$5\r\noptin\r\n$11\r\ncaching-yes\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"},
			{"PING", "+PONG\r\n"}, // CACHING lasts one command
			{"CLIENT TRACKINGINFO", "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$5\r\noptin\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"},
			{"CLIENT CACHING maybe", "-ERR syntax error\r\n"},
			{"CLIENT CACHING yes x", "-ERR wrong number of arguments for 'client|caching' command\r\n"},
			{"CLIENT TRACKING on OPTOUT", "-ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.\r\n"},
			{"CLIENT TRACKING on OPTIN NOLOOP", "+OK\r\n"},
			{"CLIENT TRACKINGINFO", "*6\r\n$5\r\nflags\r\n*3\r\n$2\r\non\r\n$5\r\noptin\r\n$6\r\nnoloop\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"},
			{"CLIENT GETREDIR", ":0\r\n"},
			{"CLIENT TRACKING off", "+OK\r\n"},
			{"CLIENT TRACKING on OPTOUT", "+OK\r\n"},
			{"CLIENT CACHING yes", "-ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.\r\n"},
			{"CLIENT CACHING no", "+OK\r\n"},
			{"CLIENT TRACKINGINFO", "*6\r\n$5\r\nflags\r\n*3\r\n$2\r\non\r\n$6\r\noptout\r\n$10\r\ncaching-no\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"},
		}},
		{"option errors", []step{
			{"CLIENT TRACKING on REDIRECT 99999", "-ERR The client ID you want redirect to does not exist\r\n"},
			{"CLIENT TRACKING on REDIRECT x", "-ERR value is not an integer or out of range\r\n"},
			{"CLIENT TRACKING on REDIRECT 0", "-ERR The client ID you want redirect to does not exist\r\n"},
			{"CLIENT TRACKING on PREFIX a", "-ERR PREFIX option requires BCAST mode to be enabled\r\n"},
			{"CLIENT TRACKING on OPTIN OPTOUT", "-ERR You can't specify both OPTIN mode and OPTOUT mode\r\n"},
			{"CLIENT TRACKING on BCAST OPTIN", "-ERR OPTIN and OPTOUT are not compatible with BCAST\r\n"},
			{"CLIENT TRACKING maybe", "-ERR syntax error\r\n"},
			{"CLIENT TRACKING on FOO", "-ERR syntax error\r\n"},
			{"CLIENT TRACKING on REDIRECT", "-ERR syntax error\r\n"},
			{"CLIENT TRACKING", "-ERR wrong number of arguments for 'client|tracking' command\r\n"},
			{"CLIENT NO-EVICT on", "+OK\r\n"},
			{"CLIENT NO-EVICT x", "-ERR syntax error\r\n"},
			{"CLIENT NO-TOUCH on", "+OK\r\n"},
			{"CLIENT NO-TOUCH off", "+OK\r\n"},
			{"CLIENT NO-TOUCH", "-ERR wrong number of arguments for 'client|no-touch' command\r\n"},
			{"CLIENT GETREDIR x", "-ERR wrong number of arguments for 'client|getredir' command\r\n"},
			{"CLIENT TRACKINGINFO x", "-ERR wrong number of arguments for 'client|trackinginfo' command\r\n"},
			{"CLIENT TRACKING on REDIRECT 1 REDIRECT 1", "-ERR A client can only redirect to a single other client\r\n"},
		}},
		{"resp3 and reset", []step{
			{"HELLO 3", ""}, // checked by TestHelloVersion
			{"CLIENT TRACKING on OPTIN", "+OK\r\n"},
			{"CLIENT TRACKINGINFO", "%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$5\r\noptin\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"},
			{"RESET", "+RESET\r\n"},
			{"CLIENT GETREDIR", ":-1\r\n"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runTranscript(t, startServer(t, serverOpts{}), tt.steps)
		})
	}
}

// TestTrackingRedirectToLiveClient: REDIRECT to an open connection's id is accepted and
// reported by GETREDIR.
func TestTrackingRedirectToLiveClient(t *testing.T) {
	s := startServer(t, serverOpts{})
	other := s.client(t, 2, "").Conn()
	defer other.Close()
	id := other.ClientID(context.Background()).Val()
	runTranscript(t, s, []step{
		{fmt.Sprintf("CLIENT TRACKING on REDIRECT %d", id), "+OK\r\n"},
		{"CLIENT GETREDIR", fmt.Sprintf(":%d\r\n", id)},
	})
}

// TestHelloVersion: HELLO and INFO claim the same Redis version; leafd's own is apart.
func TestHelloVersion(t *testing.T) {
	forEachProto(t, func(t *testing.T, proto int) {
		s := startServer(t, serverOpts{})
		c := s.client(t, proto, "")
		ctx := context.Background()
		hello, err := c.Do(ctx, "HELLO", proto).Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		switch v := hello.(type) {
		case map[any]any:
			for k, x := range v {
				m[k.(string)] = x
			}
		case []any:
			for i := 0; i+1 < len(v); i += 2 {
				m[v[i].(string)] = v[i+1]
			}
		}
		if m["version"] != RedisVersion || m["leafd_version"] != "test" {
			t.Errorf("HELLO: got version %v, leafd_version %v; want %s, test", m["version"], m["leafd_version"], RedisVersion)
		}
		info := c.Info(ctx, "server").Val()
		if !strings.Contains(info, "redis_version:"+RedisVersion+"\r\n") || !strings.Contains(info, "leafd_version:test\r\n") {
			t.Errorf("INFO server: got %q, want redis_version:%s and leafd_version:test", info, RedisVersion)
		}
	})
}

// TestSnowflakeString: IDS.SNOWFLAKE ... STRING answers bulk strings of the same IDs, for
// clients that would round an integer reply above 2^53.
func TestSnowflakeString(t *testing.T) {
	forEachProto(t, func(t *testing.T, proto int) {
		s := startServer(t, serverOpts{})
		c := s.client(t, proto, "")
		ctx := context.Background()
		one, err := c.Do(ctx, "IDS.SNOWFLAKE", "string").Result()
		str, ok := one.(string)
		if err != nil || !ok {
			t.Fatalf("IDS.SNOWFLAKE STRING: got %T %v, %v; want a bulk string", one, one, err)
		}
		first, err := strconv.ParseInt(str, 10, 64)
		if err != nil || first < 1<<53 {
			t.Fatalf("IDS.SNOWFLAKE STRING: got %q, want the decimal of an ID above 2^53", str)
		}
		many, err := c.Do(ctx, "IDS.SNOWFLAKE", 5, "STRING").StringSlice()
		if err != nil || len(many) != 5 {
			t.Fatalf("IDS.SNOWFLAKE 5 STRING: got %v, %v", many, err)
		}
		prev := first
		for _, m := range many {
			v, err := strconv.ParseInt(m, 10, 64)
			if err != nil || v <= prev {
				t.Errorf("got %q after %d, want a larger ID", m, prev)
			}
			prev = v
		}
		for _, bad := range [][]any{{"IDS.SNOWFLAKE", 5, "STRING", "x"}, {"IDS.SNOWFLAKE", "STRING", 5}} {
			if err := c.Do(ctx, bad...).Err(); err == nil {
				t.Errorf("%v: got no error", bad)
			}
		}
	})
}
