// Package bench is leafd's load generator. It opens a number of client connections to one or
// several RESP servers (leafd, or redis-server as a baseline), sends INCR tag,
// IDS.SNOWFLAKE or IDS.SEGMENT tag n with a pipeline depth, for a duration or a number of
// requests, and reports throughput and latency quantiles.
//
// The client is built not to be the bottleneck: each connection writes a pre-built buffer of
// P requests with one write and parses the replies with a fixed-buffer reader (Reader), and
// latencies go into a fixed-size log-bucket histogram (Histogram); nothing allocates per
// request. With Check on, every ID is kept and verified at the end: unique across all
// connections, and strictly increasing on each connection.
package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Command is the request a run sends.
type Command string

// The commands the generator knows.
const (
	CmdIncr      Command = "incr"      // INCR tag
	CmdSnowflake Command = "snowflake" // IDS.SNOWFLAKE, or IDS.SNOWFLAKE n when Batch > 1
	CmdSegment   Command = "segment"   // IDS.SEGMENT tag n
	CmdIncrBy    Command = "incrby"    // INCRBY tag n: a block of n IDs, the reply is its highest
)

// Config configures a run. A zero field takes its default from DefaultConfig.
type Config struct {
	// Addrs are the servers (host:port). Connection i goes to Addrs[i % len(Addrs)].
	Addrs []string
	// Clients is the number of connections (default 50, as redis-benchmark).
	Clients int
	// Pipeline is the number of requests each connection sends before reading the replies
	// (default 1: request/reply).
	Pipeline int
	// Duration of the measured part of the run. Used when Requests is 0 (default 10s).
	Duration time.Duration
	// Requests, when positive, ends the run after this many requests across all connections
	// instead of after Duration.
	Requests int64
	// Warmup runs the load this long before measuring; its requests are not counted (but
	// their IDs are checked).
	Warmup time.Duration
	// Command is the request (default CmdIncr).
	Command Command
	// Tag is the segment tag of INCR and IDS.SEGMENT (default "bench").
	Tag string
	// Batch is the count of IDS.SEGMENT and INCRBY (default 10) and of IDS.SNOWFLAKE (default 1: the
	// command is sent without a count).
	Batch int
	// Check keeps every ID and verifies uniqueness across connections and strict increase
	// on each connection. Uniqueness across several servers holds only when they share a
	// store (segment) or have distinct worker ids (snowflake). It costs 8 bytes per ID.
	Check bool
	// Tags, when above 1, spreads INCR and IDS.SEGMENT over that many tags, Tag:0 .. Tag:N-1,
	// round-robin: each connection starts at its own offset and takes the next tag for each
	// request. Every tag is touched once before the warm-up (its creation and first load are
	// not measured). Check is not available with Tags > 1 (IDs of different tags are not
	// ordered).
	Tags int
	// Client selects the client library: ClientRaw (default: this package's own, which
	// allocates nothing per request) or ClientGoRedis (github.com/redis/go-redis/v9, one client
	// with one connection per connection, requests sent with its pipeline).
	Client string
	// DialTimeout bounds connecting (default 5s).
	DialTimeout time.Duration
	// Timeout closes a connection whose replies stop for this long (default 10s).
	Timeout time.Duration
}

// The client libraries.
const (
	ClientRaw     = "raw"
	ClientGoRedis = "goredis"
)

// DefaultConfig returns the defaults; Addrs is 127.0.0.1:6380 (leafd's default).
func DefaultConfig() Config {
	return Config{
		Addrs:       []string{"127.0.0.1:6380"},
		Clients:     50,
		Pipeline:    1,
		Duration:    10 * time.Second,
		Command:     CmdIncr,
		Tag:         "bench",
		Tags:        1,
		Client:      ClientRaw,
		DialTimeout: 5 * time.Second,
		Timeout:     10 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if len(c.Addrs) == 0 {
		c.Addrs = d.Addrs
	}
	if c.Clients <= 0 {
		c.Clients = d.Clients
	}
	if c.Pipeline <= 0 {
		c.Pipeline = d.Pipeline
	}
	if c.Duration <= 0 {
		c.Duration = d.Duration
	}
	if c.Command == "" {
		c.Command = d.Command
	}
	if c.Tag == "" {
		c.Tag = d.Tag
	}
	if c.Tags <= 0 {
		c.Tags = d.Tags
	}
	if c.Client == "" {
		c.Client = d.Client
	}
	if c.Batch <= 0 {
		c.Batch = 1
		if c.Command == CmdSegment || c.Command == CmdIncrBy {
			c.Batch = 10
		}
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	return c
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch c.Command {
	case CmdIncr, CmdSnowflake, CmdSegment, CmdIncrBy:
	default:
		return fmt.Errorf("bench: unknown command %q (want %s, %s, %s or %s)", c.Command, CmdIncr, CmdSnowflake, CmdSegment, CmdIncrBy)
	}
	if c.Command == CmdIncr && c.Batch != 1 {
		return errors.New("bench: INCR takes no batch count")
	}
	if c.Tags > 1 && c.Command == CmdSnowflake {
		return errors.New("bench: IDS.SNOWFLAKE has no tag; -tags applies to incr and segment")
	}
	if c.Tags > 1 && c.Check {
		return errors.New("bench: -check needs a single tag (IDs of different tags are not ordered)")
	}
	if c.Tags > 1 && c.Client == ClientGoRedis {
		return errors.New("bench: -tags needs the raw client")
	}
	if c.Client != ClientRaw && c.Client != ClientGoRedis {
		return fmt.Errorf("bench: unknown client %q (want %s or %s)", c.Client, ClientRaw, ClientGoRedis)
	}
	if strings.ContainsAny(c.Tag, " \r\n") {
		return fmt.Errorf("bench: tag %q contains a space or a line break", c.Tag)
	}
	for _, a := range c.Addrs {
		if a == "" {
			return errors.New("bench: empty address")
		}
	}
	if c.Pipeline > 1<<16 {
		return fmt.Errorf("bench: pipeline %d is above 65536", c.Pipeline)
	}
	return nil
}

// args returns the command's arguments (the first tag's when Tags > 1).
func (c Config) args() []string { return c.argsFor(c.tagName(0)) }

// tagName is the name of tag i: Tag itself with one tag, Tag:i with several.
func (c Config) tagName(i int) string {
	if c.Tags <= 1 {
		return c.Tag
	}
	return c.Tag + ":" + strconv.Itoa(i)
}

// argsFor returns the command's arguments for tag.
func (c Config) argsFor(tag string) []string {
	switch c.Command {
	case CmdSnowflake:
		if c.Batch > 1 {
			return []string{"IDS.SNOWFLAKE", strconv.Itoa(c.Batch)}
		}
		return []string{"IDS.SNOWFLAKE"}
	case CmdSegment:
		return []string{"IDS.SEGMENT", tag, strconv.Itoa(c.Batch)}
	case CmdIncrBy:
		return []string{"INCRBY", tag, strconv.Itoa(c.Batch)}
	}
	return []string{"INCR", tag}
}

// encode returns args as a RESP multibulk request.
func encode(args []string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}
