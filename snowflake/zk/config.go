package zk

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// CacheFile is the name, in the data dir, of the local cache of earlier versions. Its content
// is merged into snowflake.LocalStateFile when a source opens the data dir (see
// snowflake/internal/statefile/bound.go).
const CacheFile = statefile.LegacyZKFile

// leafReportMs is Leaf's reporting period: a node written by Leaf itself may have been used up
// to about this long after its timestamp.
const leafReportMs = 3000

// Config configures a Source. A zero field means its default unless said otherwise.
type Config struct {
	// Servers: ZooKeeper addresses (host:port). Required.
	Servers []string
	// Chroot: a path prefix for every node ("/leaf"), as in the connection string
	// "host:port/leaf" (see ParseConnect). Empty: none.
	Chroot string
	// Name: the cluster name (Leaf's leaf.name): nodes live under /snowflake/<Name>. Default "leafd".
	Name string
	// Addr: this instance's identity, ip:port (--advertise-addr; see DefaultAdvertiseAddr). Required.
	Addr string
	// DataDir holds the local state <DataDir>/snowflake.json (locked). Required.
	DataDir string
	// Reuse lets this instance take over the worker id of a dead instance of another identity
	// (see the type's doc). Nodes whose holder ran without reuse are never taken over.
	Reuse bool
	// OutageTolerance: how far past the bound ZooKeeper last confirmed this instance keeps
	// issuing when it cannot reach ZooKeeper (0, the default: not at all, i.e. at most the rest
	// of its lease). Another data dir that later claims the id starts that much further above
	// the bound. Negative is an error.
	OutageTolerance time.Duration
	// MaxWorkerID: the largest id the layout encodes (Layout.MaxWorkerID()). Default 1023.
	MaxWorkerID int64
	// SessionTimeout of the ZooKeeper session. Default 10s.
	SessionTimeout time.Duration
	// ReportInterval: how often the forever node's timestamp is refreshed (Leaf: 3s) and a bound
	// kept only locally during an outage is copied to ZooKeeper. Default 3s.
	ReportInterval time.Duration
	// Clock gives the reported timestamps, the release time of a deleted state node and the
	// pacing of the reports. Default clock.Real.
	Clock clock.Clock
	// Logger; default none.
	Logger *zap.Logger
}

// DefaultConfig returns the defaults (the fields that have one; Servers, Addr and DataDir are
// required). cmd/leafd's flags take their defaults from it.
func DefaultConfig() Config {
	return Config{
		Name:           "leafd",
		MaxWorkerID:    1023,
		SessionTimeout: 10 * time.Second,
		ReportInterval: 3 * time.Second,
		Clock:          clock.Real{},
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Name == "" {
		c.Name = d.Name
	}
	if c.MaxWorkerID == 0 {
		c.MaxWorkerID = d.MaxWorkerID
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = d.SessionTimeout
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = d.ReportInterval
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate checks the configuration, defaults applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	if len(c.Servers) == 0 {
		return errors.New("snowflake: Config.Servers is empty")
	}
	if c.DataDir == "" {
		return errors.New("snowflake: Config.DataDir is empty")
	}
	if strings.ContainsAny(c.Name, "/") {
		return fmt.Errorf("snowflake: cluster name %q contains '/'", c.Name)
	}
	if c.Chroot != "" {
		if err := validChroot(c.Chroot); err != nil || c.Chroot == "/" {
			return fmt.Errorf("snowflake: ZooKeeper chroot %q: want /a/b", c.Chroot)
		}
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("snowflake: advertise address %q is not ip:port", c.Addr)
	}
	if strings.Contains(c.Addr, "-") || strings.Contains(c.Addr, "/") {
		return fmt.Errorf("snowflake: advertise address %q may not contain '-' or '/'", c.Addr)
	}
	if c.MaxWorkerID < 0 || c.SessionTimeout < time.Second || c.ReportInterval < 0 {
		return errors.New("snowflake: Config: MaxWorkerID, SessionTimeout (≥ 1s) or ReportInterval out of range")
	}
	if c.OutageTolerance < 0 {
		return fmt.Errorf("snowflake: Config.OutageTolerance %v is negative", c.OutageTolerance)
	}
	return nil
}
