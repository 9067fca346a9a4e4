package mysqlstore

// The MySQL store's configuration and the driver settings it derives from it.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/internal/storeerr/mysqlerr"
	"github.com/leafd/leafd/segment"
)

// MySQLConfig configures OpenMySQL. Start from DefaultMySQLConfig: a zero count or duration
// means its default, but the zero CreateTable and RequireSemiSync are false and the zero
// FailoverAllocs turns the failover fence off.
type MySQLConfig struct {
	// DSN is a go-sql-driver/mysql DSN, e.g. leaf:pw@tcp(db:3306)/leaf. The driver timeouts
	// timeout (dial), readTimeout and writeTimeout are set to QueryTimeout when the DSN does not
	// set them, so that a dead or hung server is noticed even outside a context.
	DSN string
	// MaxOpenConns bounds the connections to the database. Default 8.
	MaxOpenConns int
	// MaxIdleConns is how many idle connections are kept. Default MaxOpenConns.
	MaxIdleConns int
	// ConnMaxLifetime recycles connections older than this (below typical proxy and server
	// idle limits). Default 3 minutes.
	ConnMaxLifetime time.Duration
	// QueryTimeout bounds every store call (a whole allocation transaction included). Default 3s.
	QueryTimeout time.Duration
	// CreateTable creates leaf_alloc with Leaf's DDL when it is missing (CREATE TABLE IF NOT
	// EXISTS, at open and, until it succeeds, before each call). Default true. It also creates
	// leafd's table leafd_fence when FailoverAllocs is set.
	CreateTable bool
	// FailoverAllocs is the most allocations per tag a database failover may lose (a replica
	// promoted before it received them). When an allocation finds that the database is not the
	// one that granted the tag's last range (the failover fence, docs/MYSQL.md), it first moves
	// max_id forward by FailoverAllocs × max(MaxStep, the tag's stored step). Default 20; 0
	// turns the fence off (Leaf's behaviour: a lagging replica hands out ranges again).
	FailoverAllocs int64
	// MaxStep is the largest step any instance may use for an allocation (the generator's
	// MaxStep; Leaf's is 1,000,000). Default 1,000,000.
	MaxStep int64
	// RequireSemiSync refuses to lease (ErrUnavailable) unless the primary replicates
	// semi-synchronously (Rpl_semi_sync_master_status or _source_status ON) before the
	// allocation and no commit went unacknowledged while it ran. Default false.
	RequireSemiSync bool
	// Now is the clock of the instants recorded at takeovers of the database fence row, which
	// decide which shaped tags' rows a takeover may have lost (shaperow.go): the clock that
	// picks their periods. Default time.Now.
	Now func() time.Time
	// Cluster is what this process saw of the Galera clusters behind the DSN (shared with
	// the other stores of the process): a cluster restarted from a member that lacked
	// commits is then another database to the fence. nil: not checked.
	Cluster *mysqlcluster.History
}

// DefaultMySQLConfig returns the defaults; set DSN before use.
func DefaultMySQLConfig() MySQLConfig {
	return MySQLConfig{
		MaxOpenConns:    8,
		MaxIdleConns:    8,
		ConnMaxLifetime: 3 * time.Minute,
		QueryTimeout:    3 * time.Second,
		CreateTable:     true,
		FailoverAllocs:  20,
		MaxStep:         1_000_000,
	}
}

// Validate reports the first invalid field.
func (c MySQLConfig) Validate() error {
	if c.DSN == "" {
		return errors.New("segment: mysql DSN is empty")
	}
	if _, err := mysqlerr.ParseDSN(c.DSN); err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	switch {
	case c.MaxOpenConns < 0:
		return fmt.Errorf("segment: mysql MaxOpenConns %d is negative", c.MaxOpenConns)
	case c.MaxIdleConns < 0:
		return fmt.Errorf("segment: mysql MaxIdleConns %d is negative", c.MaxIdleConns)
	case c.ConnMaxLifetime < 0:
		return fmt.Errorf("segment: mysql ConnMaxLifetime %v is negative", c.ConnMaxLifetime)
	case c.QueryTimeout < 0:
		return fmt.Errorf("segment: mysql QueryTimeout %v is negative", c.QueryTimeout)
	case c.FailoverAllocs < 0:
		return fmt.Errorf("segment: mysql FailoverAllocs %d is negative", c.FailoverAllocs)
	case c.MaxStep < 0:
		return fmt.Errorf("segment: mysql MaxStep %d is negative", c.MaxStep)
	case c.FailoverAllocs > 0 && max(c.MaxStep, 1) > segment.MaxRangeEnd/4/c.FailoverAllocs:
		return fmt.Errorf("segment: mysql FailoverAllocs %d × MaxStep %d is too large a gap", c.FailoverAllocs, c.MaxStep)
	}
	return nil
}

func (c MySQLConfig) withDefaults() MySQLConfig {
	d := DefaultMySQLConfig()
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = d.MaxOpenConns
	}
	if c.MaxIdleConns == 0 {
		c.MaxIdleConns = c.MaxOpenConns
	}
	if c.ConnMaxLifetime == 0 {
		c.ConnMaxLifetime = d.ConnMaxLifetime
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = d.QueryTimeout
	}
	if c.MaxStep == 0 {
		c.MaxStep = d.MaxStep
	}
	return c
}

// idleSessionTimeout is the wait_timeout of the store's sessions: how long the server keeps a
// session that sends nothing. Every store call ends within QueryTimeout (its context), so a
// session idle for longer inside a transaction belongs to a process that stopped running
// (SIGSTOP, a VM or GC pause, a partition that keeps the TCP connection up); ending it rolls
// its transaction back and frees the tag's row lock for the other instances, instead of the
// server's default of 8 hours. Twice QueryTimeout, at least 2 s, in whole seconds.
func idleSessionTimeout(query time.Duration) time.Duration {
	return max(2*query, 2*time.Second).Round(time.Second)
}

// driverConfig is the driver's configuration for cfg (with its defaults applied): the DSN, and
// for each of these the DSN does not set, leafd's choice:
//   - timeout, readTimeout, writeTimeout: QueryTimeout, so a hung database is noticed;
//   - wait_timeout: idleSessionTimeout, so a paused holder's row lock is released;
//   - interpolateParams=true: statements with arguments go as text in one round trip each,
//     instead of a prepare and an execute (an allocation is 6 round trips instead of about 10,
//     which is what a far database's refill time is made of). The driver falls back to
//     prepared statements for the character sets where interpolation is not safe (it refuses
//     to interpolate them), and escapes by the session's NO_BACKSLASH_ESCAPES mode.
func driverConfig(cfg MySQLConfig) (*mysql.Config, error) {
	dcfg, err := mysqlerr.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("segment: %w", err)
	}
	if dcfg.Timeout == 0 {
		dcfg.Timeout = cfg.QueryTimeout
	}
	if dcfg.ReadTimeout == 0 {
		dcfg.ReadTimeout = cfg.QueryTimeout
	}
	if dcfg.WriteTimeout == 0 {
		dcfg.WriteTimeout = cfg.QueryTimeout
	}
	// A session that stops sending (its process paused inside an allocation) is ended by the
	// server after idle, which releases the row locks of its transaction (idleSessionTimeout).
	// The driver sends it as SET wait_timeout on each new connection; a DSN that sets it wins.
	if _, ok := dcfg.Params["wait_timeout"]; !ok {
		if dcfg.Params == nil {
			dcfg.Params = map[string]string{}
		}
		dcfg.Params["wait_timeout"] = strconv.FormatInt(int64(idleSessionTimeout(cfg.QueryTimeout)/time.Second), 10)
	}
	// ParseDSN cannot tell an absent interpolateParams from false; the DSN's text can.
	if !dsnSets(cfg.DSN, "interpolateParams") {
		dcfg.InterpolateParams = true
	}
	return dcfg, nil
}

// dsnSets reports whether the DSN's parameters (after the '?' that follows the last '/', as
// the driver parses them) name param.
func dsnSets(dsn, param string) bool {
	rest := dsn[strings.LastIndexByte(dsn, '/')+1:]
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		return false
	}
	for _, kv := range strings.Split(rest[q+1:], "&") {
		if k, _, _ := strings.Cut(kv, "="); k == param {
			return true
		}
	}
	return false
}
