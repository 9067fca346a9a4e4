package main

import (
	"fmt"
	"io"
	"testing"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/mysqlworker"
	"github.com/leafd/leafd/snowflake/zk"
)

// TestSnowflakeFlagDefaults: the snowflake and ZooKeeper flags default to snowflake.DefaultConfig
// and zk.DefaultConfig, the one place those defaults live.
func TestSnowflakeFlagDefaults(t *testing.T) {
	cfg, err := loadConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sf, zc := snowflake.DefaultConfig(), zk.DefaultConfig()
	l := sf.Layout
	for _, c := range []struct {
		flag      string
		got, want any
	}{
		{"snowflake-epoch", cfg.SnowflakeEpoch, l.EpochMs()},
		{"snowflake-bits", cfg.SnowflakeBits, fmt.Sprintf("%d/%d/%d", l.TimeBits, l.WorkerBits, l.SeqBits)},
		{"snowflake-seq-zero", cfg.SnowflakeSeq0, sf.SequenceStartZero},
		{"clock-back-max", cfg.ClockBackMax, sf.MaxBackward},
		{"lease-window", cfg.LeaseWindow, sf.LeaseWindow},
		{"start-wait-max", cfg.StartWaitMax, sf.MaxStartWait},
		{"name", cfg.Name, zc.Name},
		{"zk-session-timeout", cfg.ZKSession, zc.SessionTimeout},
		{"zk-outage-tolerance", cfg.ZKOutageTolerance, zc.OutageTolerance},
		{"worker-lease", cfg.WorkerLease, mysqlworker.DefaultConfig().Lease},
	} {
		if c.got != c.want {
			t.Errorf("--%s defaults to %v, want %v (the package default)", c.flag, c.got, c.want)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}
