package mysqlworker

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/clock"
)

// Config configures a Source. A zero field means its default unless said otherwise.
type Config struct {
	// DSN of the database (go-sql-driver form), the one segment mode uses. Required (unless a
	// test hands a store of its own).
	DSN string
	// DataDir holds the data dir's state <DataDir>/snowflake.json (locked), whose time bound
	// every start on the data dir honours, whatever the source. Required.
	DataDir string
	// Holder names this instance in the table (its advertise address or host name); shown to
	// operators, not used by the fences. Default: the host name.
	Holder string
	// Lease is how long a row stays held after its last renewal, on the database's clock
	// (UTC_TIMESTAMP(3)). The holder stops issuing before Lease has passed since it SENT its last
	// confirmed renewal, and a taker issues only Lease+Margin after its own acquisition (see the
	// package doc). It must be longer than the generator's LeaseWindow. Default 6s.
	Lease time.Duration
	// Margin is added to the taker's wait: it covers the clock skew between leafd hosts (and
	// between the old and the new primary) for IDs whose bound a failover lost. Default 1s.
	Margin time.Duration
	// MaxWorkerID: the largest id the layout encodes (Layout.MaxWorkerID()). Default 1023.
	MaxWorkerID int64
	// QueryTimeout bounds one statement (dial, read, write timeouts of the driver when the DSN
	// does not set them). Default: Lease/3, at most 2s.
	QueryTimeout time.Duration
	// Clock gives the send times, the deadlines, the taker's bound and the pacing of the
	// renewals. Default clock.Real (whose Now carries the monotonic reading).
	Clock clock.Clock
	// NoCreateTable: the table exists (created from docs/schema.sql) and the user may lack
	// CREATE: never run CREATE TABLE IF NOT EXISTS (leafd's --mysql-create-table=false).
	NoCreateTable bool
	// Logger; default none.
	Logger *zap.Logger
}

// DefaultConfig returns the defaults (DSN and DataDir are required).
func DefaultConfig() Config {
	return Config{
		Lease:       6 * time.Second,
		Margin:      time.Second,
		MaxWorkerID: 1023,
		Clock:       clock.Real{},
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Lease == 0 {
		c.Lease = d.Lease
	}
	if c.Margin == 0 {
		c.Margin = d.Margin
	}
	if c.MaxWorkerID == 0 {
		c.MaxWorkerID = d.MaxWorkerID
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = min(c.Lease/3, 2*time.Second)
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
	if c.DataDir == "" {
		return errors.New("snowflake: mysql worker source: Config.DataDir is empty")
	}
	if c.Lease < 300*time.Millisecond {
		return fmt.Errorf("snowflake: mysql worker lease %v is below 300ms", c.Lease)
	}
	if c.Margin < 0 || c.MaxWorkerID < 0 || c.QueryTimeout < 0 {
		return errors.New("snowflake: mysql worker source: Margin, MaxWorkerID or QueryTimeout is negative")
	}
	if len(c.Holder) > 255 {
		return fmt.Errorf("snowflake: mysql worker holder %q is longer than 255 bytes", c.Holder)
	}
	return nil
}

// TakerWait is how long after its acquisition a taker issues nothing: Lease + Margin.
func (c Config) TakerWait() time.Duration {
	c = c.withDefaults()
	return c.Lease + c.Margin
}
