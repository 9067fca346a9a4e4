package main

import (
	"strings"

	"github.com/leafd/leafd/snowflake"
	"go.uber.org/zap"
)

// openZKSource builds the ZooKeeper worker-id source: Leaf's persistent sequential nodes under
// /snowflake/<name>/forever, identified by --advertise-addr (default: the first non-loopback
// IPv4 address and the listen port, like Leaf), with a local cache in the data dir.
func openZKSource(cfg Config, maxWorkerID int64, log *zap.Logger) (snowflake.WorkerSource, error) {
	addr := cfg.AdvertiseAddr
	if addr == "" {
		var err error
		if addr, err = snowflake.DefaultAdvertiseAddr(cfg.Addr); err != nil {
			return nil, err
		}
	}
	var servers []string
	for _, s := range strings.Split(cfg.ZKAddrs, ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	return snowflake.NewZKSource(snowflake.ZKConfig{
		Servers:        servers,
		Name:           cfg.Name,
		Addr:           addr,
		DataDir:        cfg.DataDir,
		Reuse:          cfg.WorkerReuse,
		MaxWorkerID:    maxWorkerID,
		SessionTimeout: cfg.ZKSession,
		Logger:         log.Named("zookeeper"),
	})
}
