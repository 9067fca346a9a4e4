package main

// leafd adopt: the operator's step that lets leafd serve leaf_alloc rows it did not create
// (an existing Leaf table, rows inserted by hand) from their max_id, as Leaf would
// (docs/MYSQL.md, "Adopting a Leaf table"). With the failover fence on, leafd refuses such a
// row (NOTADOPTED) until this records its fence row.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/leafd/leafd/segment/mysqlstore"
)

const adoptUsage = `usage: leafd adopt [--dry-run] [--instances host:port,...] [--tags a,b] [options]

Records a leafd_fence row for every tag of leaf_alloc that has none, moving nothing: the
next range of each tag is [max_id, max_id + step), as Leaf would lease it. Running it is
the statement that this database is the current primary and its max_id values are
authoritative. It refuses a server that is read-only or replicates from another one.

With --instances (every leafd instance that may have served these tags), a tag whose max_id
is below the highest range end an instance was granted (IDS.MARKS) is not adopted: the
database lost allocations (a promoted replica that missed an earlier adoption); run
leafd raise-max-id first. An instance that does not answer stops the whole run.

The database (--mysql-dsn, --mysql-dsn-file), the instances' password (--requirepass,
--requirepass-file) and --mysql-failover-allocs are the server's options: given as flags,
else read from the server's LEAFD_* variables and its config file (LEAFD_CONFIG). The
grants adopt needs are checked first (docs/MYSQL.md, "Grants").

`

// runAdopt runs `leafd adopt args...` and returns the exit status: 0 done, 1 refused (not
// the primary, a tag below a mark, an instance that did not answer), 2 bad usage.
func runAdopt(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leafd adopt", flag.ContinueOnError)
	var c Config
	shared := []string{"mysql-dsn", "mysql-dsn-file", "requirepass", "requirepass-file", "mysql-failover-allocs"}
	shareOptions(fs, &c, shared...)
	dryRun := fs.Bool("dry-run", false, "show what would be adopted; write nothing")
	instances := fs.String("instances", "", "comma-separated RESP addresses of the leafd instances, whose marks a tag must not be below")
	only := fs.String("tags", "", "comma-separated tags to adopt (default: every tag without a fence row)")
	timeout := fs.Duration("timeout", 5*time.Second, "timeout of each instance query and each transaction")
	usage := func() { fmt.Fprint(stderr, adoptUsage); fs.PrintDefaults() }
	if err := loadShared(fs, &c, shared, args, getenv, stderr, usage); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "leafd adopt:", err)
		return 2
	}
	if c.MySQLDSN == "" {
		fmt.Fprintln(stderr, "leafd adopt: no database: give --mysql-dsn-file, LEAFD_MYSQL_DSN or --mysql-dsn (--help lists the options)")
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "leafd adopt: --timeout %v: must be positive\n", *timeout)
		return 2
	}
	if _, err := mysql.ParseDSN(c.MySQLDSN); err != nil {
		fmt.Fprintln(stderr, "leafd adopt: --mysql-dsn:", err)
		return 2
	}

	cfg := mysqlstore.DefaultMySQLConfig()
	cfg.DSN = c.MySQLDSN
	cfg.QueryTimeout = *timeout
	cfg.MaxOpenConns = 2
	cfg.CreateTable = false // Adopt creates leafd_fence itself, and only when not a dry run
	cfg.FailoverAllocs = c.MySQLFailover
	st, err := mysqlstore.OpenMySQL(ctx, cfg, zap.NewNop())
	if err != nil {
		fmt.Fprintln(stderr, "leafd adopt:", err)
		return 2
	}
	defer st.Close()
	// Every privilege adopt uses is checked before it reads an instance or writes a row.
	if err := checkAdoptGrants(ctx, c.MySQLDSN, *dryRun, *timeout); err != nil {
		fmt.Fprintln(stderr, "leafd adopt:", err)
		return 1
	}

	floors := map[string]int64{}
	from := map[string]string{}
	redis.SetLogger(quietRedisLog{})
	var checked []string
	for _, addr := range strings.Split(*instances, ",") {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			continue
		}
		got, err := instanceMarks(ctx, addr, c.RequirePass, *timeout) // raise.go
		if err != nil {
			fmt.Fprintf(stderr, "leafd adopt: instance %s: %v; nothing adopted (its marks could be above max_id)\n", addr, err)
			return 1
		}
		for tag, m := range got {
			if m > floors[tag] {
				floors[tag], from[tag] = m, addr
			}
		}
		checked = append(checked, addr)
	}

	var tags []string
	for _, tag := range strings.Split(*only, ",") {
		if tag = strings.TrimSpace(tag); tag != "" {
			tags = append(tags, tag)
		}
	}
	res, err := st.Adopt(ctx, mysqlstore.AdoptConfig{DryRun: *dryRun, Floors: floors, Tags: tags})
	if err != nil {
		fmt.Fprintln(stderr, "leafd adopt:", withGrant(ctx, c.MySQLDSN, err))
		return 1
	}
	if len(checked) > 0 {
		fmt.Fprintf(stdout, "instances checked (IDS.MARKS): %s\n", strings.Join(checked, ", "))
	} else {
		fmt.Fprintln(stdout, "no --instances: the instances' marks were not checked (after a failover, give every instance)")
	}
	status := 0
	var tw table
	tw.row("TAG", "MAX_ID", "STEP", "NEXT RANGE", "STATE")
	for _, a := range res {
		tw.row(a.Tag, strconv.FormatInt(a.MaxID, 10), strconv.FormatInt(a.Step, 10), fmt.Sprintf("[%d, %d)", a.MaxID, a.MaxID+a.Step), a.State)
		if a.Err != nil {
			status = 1
			detail := a.Err.Error()
			if inst := from[a.Tag]; inst != "" {
				detail += " (instance " + inst + ")"
			}
			fmt.Fprintf(stderr, "leafd adopt: tag %q not adopted: %s\n", a.Tag, detail)
		}
	}
	_ = tw.writeTo(stdout)
	if *dryRun {
		fmt.Fprintln(stdout, "dry run: nothing written")
	}
	return status
}
