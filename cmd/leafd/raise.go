package main

// leafd raise-max-id: the operator's command after a database failover (docs/MYSQL.md,
// "Failover runbook"). It asks each leafd instance, over RESP, for the highest range end it
// was ever granted per tag (IDS.MARKS, its durable marks, with IDS.TAGS and IDS.INFO
// high_water_mark of the tags it holds) and raises leaf_alloc.max_id
// of each tag to at least the highest of them plus a margin, in one transaction per tag that
// only ever moves max_id up.

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/leafd/leafd/segment/mysqlstore"
)

// quietRedisLog drops go-redis's own pool log (a refused dial is reported by the command).
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// raiseUsage is the subcommand's help header.
const raiseUsage = `usage: leafd raise-max-id --instances host:port[,host:port...] [options]
       leafd raise-max-id --data-dir DIR [--margin N] [--dry-run]

Reads the highest range end each leafd instance was ever granted per tag (IDS.MARKS:
its durable marks, held tags or not; IDS.INFO high_water_mark of held tags) and raises leaf_alloc.max_id of each tag above all of them plus
--margin, only upward, one transaction per tag. Instances that do not answer are
reported and make the exit status 1; the tags of those that answer are raised anyway.

With --data-dir (the embedded store, leafd stopped, e.g. after restoring a copy of
leafd.db): raises max_id of each tag in DIR/leafd.db to at least its mark in DIR/marks.db
plus --margin, only upward.

The database (--mysql-dsn, --mysql-dsn-file) and the instances' password (--requirepass,
--requirepass-file) are the server's options: given as flags, else read from the server's
LEAFD_* variables and its config file (LEAFD_CONFIG). The instances' marks are read page by
page (IDS.MARKS cursor), so any number fits their output limit.

`

// raiseMark is what one instance reported for one tag.
type raiseMark struct {
	inst string
	mark int64
}

// runRaise runs `leafd raise-max-id args...` and returns the exit status.
func runRaise(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leafd raise-max-id", flag.ContinueOnError)
	var c Config
	shared := []string{"mysql-dsn", "mysql-dsn-file", "requirepass", "requirepass-file"}
	shareOptions(fs, &c, shared...)
	instances := fs.String("instances", "", "comma-separated RESP addresses of every leafd instance")
	margin := fs.Int64("margin", 0, "IDs to add above the highest range end (for instances that cannot be reached)")
	dryRun := fs.Bool("dry-run", false, "show what would change; change nothing")
	timeout := fs.Duration("timeout", 5*time.Second, "timeout of each instance query and each transaction")
	dataDir := fs.String("data-dir", "", "the embedded store: raise the tags of DIR/leafd.db to the marks of DIR/marks.db (leafd stopped)")
	usage := func() { fmt.Fprint(stderr, raiseUsage); fs.PrintDefaults() }
	if err := loadShared(fs, &c, shared, args, getenv, stderr, usage); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "leafd raise-max-id:", err)
		return 2
	}
	if *margin < 0 || *timeout <= 0 {
		fmt.Fprintln(stderr, "leafd raise-max-id: --margin must not be negative and --timeout must be positive")
		return 2
	}
	if *dataDir != "" {
		if *instances != "" {
			fmt.Fprintln(stderr, "leafd raise-max-id: --data-dir (the embedded store) and --instances (MySQL) exclude each other")
			return 2
		}
		return runRaiseBolt(ctx, *dataDir, *margin, *dryRun, *timeout, stdout, stderr)
	}
	if c.MySQLDSN == "" || *instances == "" {
		if len(args) == 0 {
			usage()
			return 2
		}
		fmt.Fprintln(stderr, "leafd raise-max-id: want the database (--mysql-dsn-file, LEAFD_MYSQL_DSN or --mysql-dsn) and --instances, or --data-dir (--help lists the options)")
		return 2
	}
	if _, err := mysql.ParseDSN(c.MySQLDSN); err != nil {
		fmt.Fprintln(stderr, "leafd raise-max-id: --mysql-dsn:", err)
		return 2
	}

	redis.SetLogger(quietRedisLog{})
	status := 0
	marks := map[string]raiseMark{} // per tag, the highest mark of any instance
	for _, addr := range strings.Split(*instances, ",") {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			continue
		}
		got, err := instanceMarks(ctx, addr, c.RequirePass, *timeout)
		if err != nil {
			fmt.Fprintf(stderr, "leafd raise-max-id: instance %s: %v (its ranges are not taken into account; use --margin)\n", addr, err)
			status = 1
			continue
		}
		for tag, m := range got {
			if best, ok := marks[tag]; !ok || m > best.mark {
				marks[tag] = raiseMark{addr, m}
			}
		}
	}

	db, err := sql.Open("mysql", c.MySQLDSN)
	if err != nil {
		fmt.Fprintln(stderr, "leafd raise-max-id:", err)
		return 2
	}
	defer db.Close()
	tags := make([]string, 0, len(marks))
	for tag := range marks {
		tags = append(tags, tag)
	}
	slices.Sort(tags)
	// max_id of every tag, read in batches without locks: a tag already at or above its target
	// needs no transaction (at a million marks, most of them).
	maxIDs, err := mysqlstore.ReadMaxIDs(ctx, db, tags, *timeout)
	if err != nil {
		fmt.Fprintln(stderr, "leafd raise-max-id: read max_id:", err)
		return 1
	}
	var tw table
	tw.row("TAG", "HIGHEST RANGE END (instance)", "MAX_ID BEFORE", "MAX_ID AFTER")
	for _, tag := range tags {
		best := marks[tag]
		target := best.mark + *margin
		before, after := int64(0), int64(0)
		if cur, ok := maxIDs[tag]; ok && cur >= target {
			before, after = cur, cur
		} else if before, after, err = mysqlstore.RaiseMaxID(ctx, db, tag, target, *dryRun, *timeout); err != nil {
			fmt.Fprintf(stderr, "leafd raise-max-id: tag %q: %v\n", tag, err)
			status = 1
			continue
		}
		tw.row(tag, fmt.Sprintf("%d (%s)", best.mark, best.inst), strconv.FormatInt(before, 10), strconv.FormatInt(after, 10))
	}
	_ = tw.writeTo(stdout)
	if *dryRun {
		fmt.Fprintln(stdout, "dry run: nothing changed")
	}
	return status
}

// instanceMarks asks one instance for the highest range end it was ever granted per tag: its
// durable marks (IDS.MARKS, read from its marks file, so the tags it has not loaded since a
// restart are included), raised by the high_water_mark of the tags it holds (IDS.TAGS,
// IDS.INFO). An instance without IDS.MARKS (an older version) is an error: its held tags
// alone could miss the tags it served before its last restart.
func instanceMarks(ctx context.Context, addr, pass string, timeout time.Duration) (map[string]int64, error) {
	c := redis.NewClient(&redis.Options{
		Addr: addr, Password: pass, Protocol: 2, PoolSize: 1, MaxRetries: -1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		DisableIdentity: true,
	})
	defer c.Close()
	out, err := allMarks(ctx, c)
	if err != nil {
		return nil, err
	}
	tags, err := heldTags(ctx, c)
	if err != nil {
		return nil, err
	}
	// IDS.INFO of the held tags, pipelined 1000 at a time.
	for len(tags) > 0 {
		batch := tags[:min(len(tags), 1000)]
		tags = tags[len(batch):]
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, tag := range batch {
			cmds[i] = pipe.Do(ctx, "IDS.INFO", tag)
		}
		_, _ = pipe.Exec(ctx) // each command's error is read below
		for i, tag := range batch {
			v, err := cmds[i].Result()
			if err != nil && strings.HasPrefix(err.Error(), "NOTAG ") {
				// Dropped between IDS.TAGS and IDS.INFO (a refused warm start, an idle tag):
				// no longer held, so whatever it was granted is in its durable marks above.
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("IDS.INFO %s: %w", tag, err)
			}
			m, ok := infoField(v, "high_water_mark")
			if !ok {
				return nil, fmt.Errorf("IDS.INFO %s: no high_water_mark in %v", tag, v)
			}
			out[tag] = max(out[tag], m)
		}
	}
	return out, nil
}

// marksPage is the COUNT of each IDS.MARKS page the admin tools ask for; the instance
// shortens a page to its output limit.
const marksPage = 10000

// allMarks pages through IDS.MARKS with its cursor (any number of marks fits the output
// limit); an instance whose IDS.MARKS takes no cursor (older versions) answers the whole list.
func allMarks(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	out := map[string]int64{}
	cursor := "0"
	for {
		v, err := c.Do(ctx, "IDS.MARKS", cursor, "COUNT", marksPage).Slice()
		if err != nil && strings.Contains(err.Error(), "wrong number of arguments") && cursor == "0" {
			all, err := c.Do(ctx, "IDS.MARKS").Result()
			if err != nil {
				return nil, fmt.Errorf("IDS.MARKS: %w", err)
			}
			if out, err = marksField(all); err != nil {
				return nil, fmt.Errorf("IDS.MARKS: %w", err)
			}
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("IDS.MARKS %s: %w", cursor, err)
		}
		next, page, err := marksPageOf(v)
		if err != nil {
			return nil, fmt.Errorf("IDS.MARKS %s: %w", cursor, err)
		}
		for tag, m := range page {
			out[tag] = max(out[tag], m)
		}
		if next == "0" {
			return out, nil
		}
		cursor = next
	}
}

// marksPageOf reads one IDS.MARKS cursor page: the next cursor and the tag, mark pairs.
func marksPageOf(v []any) (string, map[string]int64, error) {
	if len(v) == 2 {
		next, ok1 := v[0].(string)
		pairs, ok2 := v[1].([]any)
		if ok1 && ok2 {
			page, err := marksField(pairs)
			return next, page, err
		}
	}
	return "", nil, fmt.Errorf("unexpected reply %.200v", v)
}

// heldTags pages through IDS.TAGS with its cursor (any number of tags fits the output
// limit); an instance whose IDS.TAGS takes no cursor (older versions) answers the whole list.
func heldTags(ctx context.Context, c *redis.Client) ([]string, error) {
	var tags []string
	cursor := "0"
	for {
		v, err := c.Do(ctx, "IDS.TAGS", cursor, "COUNT", 10000).Slice()
		if err != nil && strings.Contains(err.Error(), "wrong number of arguments") && cursor == "0" {
			all, err := c.Do(ctx, "IDS.TAGS").StringSlice()
			if err != nil {
				return nil, fmt.Errorf("IDS.TAGS: %w", err)
			}
			return all, nil
		}
		if err != nil {
			return nil, fmt.Errorf("IDS.TAGS %s: %w", cursor, err)
		}
		if len(v) != 2 {
			return nil, fmt.Errorf("IDS.TAGS %s: unexpected reply %v", cursor, v)
		}
		next, ok := v[0].(string)
		page, ok2 := v[1].([]any)
		if !ok || !ok2 {
			return nil, fmt.Errorf("IDS.TAGS %s: unexpected reply %v", cursor, v)
		}
		for _, t := range page {
			s, ok := t.(string)
			if !ok {
				return nil, fmt.Errorf("IDS.TAGS %s: unexpected tag %v", cursor, t)
			}
			tags = append(tags, s)
		}
		if next == "0" {
			return tags, nil
		}
		cursor = next
	}
}

// marksField reads an IDS.MARKS reply (a flat array of tag, end in RESP2, a map in RESP3).
func marksField(v any) (map[string]int64, error) {
	out := map[string]int64{}
	switch r := v.(type) {
	case []any:
		if len(r)%2 != 0 {
			return nil, fmt.Errorf("odd reply length %d", len(r))
		}
		for i := 0; i < len(r); i += 2 {
			k, ok1 := r[i].(string)
			n, ok2 := r[i+1].(int64)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("bad entry %v %v", r[i], r[i+1])
			}
			out[k] = n
		}
	case map[any]any:
		for k, v := range r {
			ks, ok1 := k.(string)
			n, ok2 := v.(int64)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("bad entry %v %v", k, v)
			}
			out[ks] = n
		}
	default:
		return nil, fmt.Errorf("unexpected reply %T", v)
	}
	return out, nil
}

// infoField finds an integer field of an IDS.INFO reply (a flat array in RESP2, a map in
// RESP3).
func infoField(v any, name string) (int64, bool) {
	switch r := v.(type) {
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if k, _ := r[i].(string); k == name {
				n, ok := r[i+1].(int64)
				return n, ok
			}
		}
	case map[any]any:
		n, ok := r[name].(int64)
		return n, ok
	}
	return 0, false
}
