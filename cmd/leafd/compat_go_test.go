package main

// The Go clients of the compatibility suite (compat_test.go): go-redis in RESP2 and RESP3,
// rueidis with its client-side cache on (its default), redigo and radix.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/mediocregopher/radix/v4"
	"github.com/mediocregopher/radix/v4/resp/resp3"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// decodeFields reads IDS.DECODE's fields from a RESP2 flat array or a RESP3 map, as any
// client returns them.
func decodeFields(t *testing.T, v any) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	put := func(k, x any) {
		var n int64
		switch x := x.(type) {
		case int64:
			n = x
		case []byte:
			n, _ = strconv.ParseInt(string(x), 10, 64)
		case string:
			n, _ = strconv.ParseInt(x, 10, 64)
		}
		ks := fmt.Sprint(k)
		if b, ok := k.([]byte); ok {
			ks = string(b)
		}
		out[ks] = n
	}
	switch v := v.(type) {
	case map[any]any:
		for k, x := range v {
			put(k, x)
		}
	case map[string]any:
		for k, x := range v {
			put(k, x)
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			put(v[i], v[i+1])
		}
	default:
		t.Errorf("IDS.DECODE: got %T %v, want a map or a flat array", v, v)
	}
	return out
}

func (r *compatRun) decodedMap(proto int, id int64, f map[string]int64) {
	r.t.Helper()
	r.decoded(proto, id, f["timestamp_ms"], f["worker_id"], f["sequence"])
}

func TestCompatGoRedis(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			r := newCompatRun(t)
			ctx := context.Background()
			// Defaults, plus the password and the protocol (go-redis's default is 3).
			c := redis.NewClient(&redis.Options{Addr: r.l.Addr, Password: compatPass, Protocol: proto})
			defer c.Close()
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("connect: %v", err)
			}
			r.pass("connect")
			if v, err := c.Incr(ctx, "order").Result(); err == nil {
				r.id("order", v)
				r.pass("incr")
			} else {
				t.Errorf("INCR: %v", err)
			}
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := 0; i < 1000; i++ {
					p.Incr(ctx, "order")
				}
				return nil
			})
			if err == nil {
				ids := make([]int64, len(cmds))
				for i, cmd := range cmds {
					ids[i] = cmd.(*redis.IntCmd).Val()
				}
				r.batch("order", ids)
				r.pass("pipeline")
			} else {
				t.Errorf("pipeline: %v", err)
			}
			if ids, err := c.Do(ctx, "IDS.SEGMENT", "order", 10).Int64Slice(); err == nil && len(ids) == 10 {
				r.batch("order", ids)
				r.pass("segment")
			} else {
				t.Errorf("IDS.SEGMENT: %v, %v", ids, err)
			}
			id, err := c.Do(ctx, "IDS.SNOWFLAKE").Int64()
			ids, err2 := c.Do(ctx, "IDS.SNOWFLAKE", 1000).Int64Slice()
			if err == nil && err2 == nil {
				r.id("snowflake", id)
				r.batch("snowflake", ids)
				r.pass("snowflake")
			} else {
				t.Errorf("IDS.SNOWFLAKE: %v, %v", err, err2)
			}
			if dec, err := c.Do(ctx, "IDS.DECODE", id).Result(); err == nil {
				r.decodedMap(proto, id, decodeFields(t, dec))
			} else {
				t.Errorf("IDS.DECODE: %v", err)
			}
			if err := c.Do(ctx, "IDS.SEGMENT", "order", 0).Err(); err != nil && strings.HasPrefix(err.Error(), "LIMIT ") {
				r.pass("error")
			} else {
				t.Errorf("IDS.SEGMENT order 0: got %v, want a LIMIT error", err)
			}
			if v, err := c.Do(ctx, "AUTH", compatPass).Text(); err == nil && v == "OK" {
				r.pass("auth")
			} else {
				t.Errorf("AUTH: %v, %v", v, err)
			}
			var incr *redis.IntCmd
			var seg *redis.Cmd
			if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				incr = p.Incr(ctx, "order")
				seg = p.Do(ctx, "IDS.SEGMENT", "order", 3)
				return nil
			}); err == nil {
				ids, _ := seg.Int64Slice()
				r.batch("order", append([]int64{incr.Val()}, ids...))
				r.pass("transaction")
			} else {
				t.Errorf("transaction: %v", err)
			}
			r.restart()
			// go-redis retries a command whose connection broke (MaxRetries 3 by default).
			if v, err := c.Incr(ctx, "order").Result(); err == nil {
				r.id("order", v)
				r.pass("reconnect")
			} else {
				t.Errorf("INCR after restart: %v", err)
			}
			r.finish(proto)
		})
	}
}

func TestCompatRueidis(t *testing.T) {
	r := newCompatRun(t)
	ctx := context.Background()
	// Defaults: RESP3, client-side caching on (CLIENT TRACKING ON OPTIN at connect).
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.l.Addr}, Password: compatPass})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close()
	r.pass("connect")
	if v, err := c.Do(ctx, c.B().Incr().Key("order").Build()).AsInt64(); err == nil {
		r.id("order", v)
		r.pass("incr")
	} else {
		t.Errorf("INCR: %v", err)
	}
	cmds := make(rueidis.Commands, 1000)
	for i := range cmds {
		cmds[i] = c.B().Incr().Key("order").Build()
	}
	ids := make([]int64, 0, 1000)
	for _, res := range c.DoMulti(ctx, cmds...) {
		v, err := res.AsInt64()
		if err != nil {
			t.Fatalf("pipeline: %v", err)
		}
		ids = append(ids, v)
	}
	r.batch("order", ids)
	r.pass("pipeline")
	if ids, err := c.Do(ctx, c.B().Arbitrary("IDS.SEGMENT").Keys("order").Args("10").Build()).AsIntSlice(); err == nil {
		r.batch("order", ids)
		r.pass("segment")
	} else {
		t.Errorf("IDS.SEGMENT: %v", err)
	}
	id, err := c.Do(ctx, c.B().Arbitrary("IDS.SNOWFLAKE").Build()).AsInt64()
	batch, err2 := c.Do(ctx, c.B().Arbitrary("IDS.SNOWFLAKE").Args("1000").Build()).AsIntSlice()
	if err == nil && err2 == nil {
		r.id("snowflake", id)
		r.batch("snowflake", batch)
		r.pass("snowflake")
	} else {
		t.Errorf("IDS.SNOWFLAKE: %v, %v", err, err2)
	}
	if m, err := c.Do(ctx, c.B().Arbitrary("IDS.DECODE").Args(strconv.FormatInt(id, 10)).Build()).AsMap(); err == nil {
		f := map[string]int64{}
		for k, v := range m {
			f[k], _ = v.AsInt64()
		}
		r.decodedMap(3, id, f)
	} else {
		t.Errorf("IDS.DECODE: %v", err)
	}
	// RESP2 through rueidis's own switch for servers without RESP3 (which needs the cache off).
	c2, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.l.Addr}, Password: compatPass, AlwaysRESP2: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connect RESP2: %v", err)
	}
	defer c2.Close()
	if arr, err := c2.Do(ctx, c2.B().Arbitrary("IDS.DECODE").Args(strconv.FormatInt(id, 10)).Build()).ToArray(); err == nil {
		f := map[string]int64{}
		for i := 0; i+1 < len(arr); i += 2 {
			k, _ := arr[i].ToString()
			if v, err := arr[i+1].AsInt64(); err == nil {
				f[k] = v
			}
		}
		r.decodedMap(2, id, f)
	} else {
		t.Errorf("IDS.DECODE RESP2: %v", err)
	}
	err = c.Do(ctx, c.B().Arbitrary("IDS.SEGMENT").Keys("order").Args("0").Build()).Error()
	if err != nil && strings.HasPrefix(err.Error(), "LIMIT ") {
		r.pass("error")
	} else {
		t.Errorf("IDS.SEGMENT order 0: got %v, want a LIMIT error", err)
	}
	if err := c.Do(ctx, c.B().Auth().Password(compatPass).Build()).Error(); err == nil {
		r.pass("auth")
	} else {
		t.Errorf("AUTH: %v", err)
	}
	err = c.Dedicated(func(d rueidis.DedicatedClient) error {
		res := d.DoMulti(ctx,
			d.B().Multi().Build(),
			d.B().Incr().Key("order").Build(),
			d.B().Arbitrary("IDS.SEGMENT").Keys("order").Args("3").Build(),
			d.B().Exec().Build())
		arr, err := res[3].ToArray()
		if err != nil || len(arr) != 2 {
			return fmt.Errorf("EXEC: %v, %v", arr, err)
		}
		first, _ := arr[0].AsInt64()
		seg, _ := arr[1].AsIntSlice()
		r.batch("order", append([]int64{first}, seg...))
		return nil
	})
	if err == nil {
		r.pass("transaction")
	} else {
		t.Errorf("transaction: %v", err)
	}
	r.restart()
	// INCR is not retried by rueidis (not read-only): the first ones may fail on the dead
	// connections of its pipe and its dedicated pool.
	if v, err := retry(10, func() (int64, error) { return c.Do(ctx, c.B().Incr().Key("order").Build()).AsInt64() }); err == nil {
		r.id("order", v)
		r.pass("reconnect")
	} else {
		t.Errorf("INCR after restart: %v", err)
	}
	r.finish(2, 3)
}

func TestCompatRedigo(t *testing.T) {
	r := newCompatRun(t)
	pool := &redigo.Pool{Dial: func() (redigo.Conn, error) {
		return redigo.Dial("tcp", r.l.Addr, redigo.DialPassword(compatPass))
	}}
	defer pool.Close()
	conn := pool.Get()
	if err := conn.Err(); err != nil {
		t.Fatalf("connect: %v", err)
	}
	r.pass("connect")
	if v, err := redigo.Int64(conn.Do("INCR", "order")); err == nil {
		r.id("order", v)
		r.pass("incr")
	} else {
		t.Errorf("INCR: %v", err)
	}
	for i := 0; i < 1000; i++ {
		_ = conn.Send("INCR", "order")
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 0, 1000)
	for i := 0; i < 1000; i++ {
		v, err := redigo.Int64(conn.Receive())
		if err != nil {
			t.Fatalf("pipeline: %v", err)
		}
		ids = append(ids, v)
	}
	r.batch("order", ids)
	r.pass("pipeline")
	if ids, err := redigo.Int64s(conn.Do("IDS.SEGMENT", "order", 10)); err == nil {
		r.batch("order", ids)
		r.pass("segment")
	} else {
		t.Errorf("IDS.SEGMENT: %v", err)
	}
	id, err := redigo.Int64(conn.Do("IDS.SNOWFLAKE"))
	batch, err2 := redigo.Int64s(conn.Do("IDS.SNOWFLAKE", 1000))
	if err == nil && err2 == nil {
		r.id("snowflake", id)
		r.batch("snowflake", batch)
		r.pass("snowflake")
	} else {
		t.Errorf("IDS.SNOWFLAKE: %v, %v", err, err2)
	}
	// redigo speaks RESP2 only.
	if dec, err := redigo.Values(conn.Do("IDS.DECODE", id)); err == nil {
		r.decodedMap(2, id, decodeFields(t, dec))
	} else {
		t.Errorf("IDS.DECODE: %v", err)
	}
	if _, err := conn.Do("IDS.SEGMENT", "order", 0); err != nil && strings.HasPrefix(err.Error(), "LIMIT ") {
		r.pass("error")
	} else {
		t.Errorf("IDS.SEGMENT order 0: got %v, want a LIMIT error", err)
	}
	if v, err := redigo.String(conn.Do("AUTH", compatPass)); err == nil && v == "OK" {
		r.pass("auth")
	} else {
		t.Errorf("AUTH: %v, %v", v, err)
	}
	_ = conn.Send("MULTI")
	_ = conn.Send("INCR", "order")
	_ = conn.Send("IDS.SEGMENT", "order", 3)
	if vals, err := redigo.Values(conn.Do("EXEC")); err == nil && len(vals) == 2 {
		first, _ := redigo.Int64(vals[0], nil)
		seg, _ := redigo.Int64s(vals[1], nil)
		r.batch("order", append([]int64{first}, seg...))
		r.pass("transaction")
	} else {
		t.Errorf("transaction: %v, %v", vals, err)
	}
	conn.Close()
	r.restart()
	// The pool hands back the idle connection leafd's restart broke (no TestOnBorrow by
	// default): the first command fails, the retry dials anew.
	v, err := retry(2, func() (int64, error) {
		c := pool.Get()
		defer c.Close()
		return redigo.Int64(c.Do("INCR", "order"))
	})
	if err == nil {
		r.id("order", v)
		r.pass("reconnect")
	} else {
		t.Errorf("INCR after restart: %v", err)
	}
	r.finish(2) // redigo speaks RESP2 only
}

func TestCompatRadix(t *testing.T) {
	r := newCompatRun(t)
	ctx := context.Background()
	pool, err := radix.PoolConfig{Dialer: radix.Dialer{AuthPass: compatPass}}.New(ctx, "tcp", r.l.Addr)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer pool.Close()
	r.pass("connect")
	var v int64
	if err := pool.Do(ctx, radix.Cmd(&v, "INCR", "order")); err == nil {
		r.id("order", v)
		r.pass("incr")
	} else {
		t.Errorf("INCR: %v", err)
	}
	ids := make([]int64, 1000)
	p := radix.NewPipeline()
	for i := range ids {
		p.Append(radix.Cmd(&ids[i], "INCR", "order"))
	}
	if err := pool.Do(ctx, p); err == nil {
		r.batch("order", ids)
		r.pass("pipeline")
	} else {
		t.Errorf("pipeline: %v", err)
	}
	var seg []int64
	if err := pool.Do(ctx, radix.Cmd(&seg, "IDS.SEGMENT", "order", "10")); err == nil && len(seg) == 10 {
		r.batch("order", seg)
		r.pass("segment")
	} else {
		t.Errorf("IDS.SEGMENT: %v, %v", seg, err)
	}
	var id int64
	var batch []int64
	err = pool.Do(ctx, radix.Cmd(&id, "IDS.SNOWFLAKE"))
	err2 := pool.Do(ctx, radix.Cmd(&batch, "IDS.SNOWFLAKE", "1000"))
	if err == nil && err2 == nil {
		r.id("snowflake", id)
		r.batch("snowflake", batch)
		r.pass("snowflake")
	} else {
		t.Errorf("IDS.SNOWFLAKE: %v, %v", err, err2)
	}
	// RESP2 on the pool (radix's default sends no HELLO), RESP3 on a connection dialed with
	// Protocol "3" (radix then sends HELLO 3).
	dec := map[string]string{}
	if err := pool.Do(ctx, radix.Cmd(&dec, "IDS.DECODE", strconv.FormatInt(id, 10))); err == nil {
		r.decodedMap(2, id, decodeFields(t, anyMap(dec)))
	} else {
		t.Errorf("IDS.DECODE: %v", err)
	}
	c3, err := radix.Dialer{AuthPass: compatPass, Protocol: "3"}.Dial(ctx, "tcp", r.l.Addr)
	if err != nil {
		t.Fatalf("dial RESP3: %v", err)
	}
	defer c3.Close()
	dec3 := map[string]string{}
	if err := c3.Do(ctx, radix.Cmd(&dec3, "IDS.DECODE", strconv.FormatInt(id, 10))); err == nil {
		r.decodedMap(3, id, decodeFields(t, anyMap(dec3)))
	} else {
		t.Errorf("IDS.DECODE RESP3: %v", err)
	}
	var se resp3.SimpleError
	if err := pool.Do(ctx, radix.Cmd(nil, "IDS.SEGMENT", "order", "0")); errors.As(err, &se) && strings.HasPrefix(se.Error(), "LIMIT ") {
		r.pass("error")
	} else {
		t.Errorf("IDS.SEGMENT order 0: got %v, want a LIMIT error", err)
	}
	var ok string
	if err := pool.Do(ctx, radix.Cmd(&ok, "AUTH", compatPass)); err == nil && ok == "OK" {
		r.pass("auth")
	} else {
		t.Errorf("AUTH: %v, %v", ok, err)
	}
	err = pool.Do(ctx, radix.WithConn("", func(ctx context.Context, conn radix.Conn) error {
		if err := conn.Do(ctx, radix.Cmd(nil, "MULTI")); err != nil {
			return err
		}
		if err := conn.Do(ctx, radix.Cmd(nil, "INCR", "order")); err != nil {
			return err
		}
		if err := conn.Do(ctx, radix.Cmd(nil, "IDS.SEGMENT", "order", "3")); err != nil {
			return err
		}
		var res []any
		if err := conn.Do(ctx, radix.Cmd(&res, "EXEC")); err != nil {
			return err
		}
		if len(res) != 2 {
			return fmt.Errorf("EXEC: got %v", res)
		}
		got := []int64{toInt(res[0])}
		if seg, ok := res[1].([]any); ok {
			for _, x := range seg {
				got = append(got, toInt(x))
			}
		}
		if len(got) != 4 {
			return fmt.Errorf("EXEC: got %v (%T %T)", res, res[0], res[1])
		}
		r.batch("order", got)
		return nil
	}))
	if err == nil {
		r.pass("transaction")
	} else {
		t.Errorf("transaction: %v", err)
	}
	r.restart()
	// Each of the pool's connections (4 by default) fails once before radix replaces it.
	if v, err := retry(5, func() (int64, error) {
		var v int64
		err := pool.Do(ctx, radix.Cmd(&v, "INCR", "order"))
		return v, err
	}); err == nil {
		r.id("order", v)
		r.pass("reconnect")
	} else {
		t.Errorf("INCR after restart: %v", err)
	}
	r.finish(2, 3)
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func toInt(x any) int64 {
	switch x := x.(type) {
	case int64:
		return x
	case int:
		return int64(x)
	case string:
		v, _ := strconv.ParseInt(x, 10, 64)
		return v
	case []byte:
		v, _ := strconv.ParseInt(string(x), 10, 64)
		return v
	}
	return -1
}
