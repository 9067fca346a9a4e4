package main

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/zk"
)

// defaultAdvertiseAddr is zk.DefaultAdvertiseAddr; a test replaces it to model a host
// without a non-loopback address.
var defaultAdvertiseAddr = zk.DefaultAdvertiseAddr

// openZKSource builds the ZooKeeper worker-id source: Leaf's persistent sequential nodes under
// [chroot]/snowflake/<name>/forever, identified by --advertise-addr (default: the first
// non-loopback IPv4 address and the listen port, like Leaf), with its state in the data dir.
func openZKSource(cfg Config, maxWorkerID int64, log *zap.Logger) (snowflake.WorkerSource, error) {
	addr := cfg.AdvertiseAddr
	if addr == "" {
		var err error
		if addr, err = defaultAdvertiseAddr(cfg.Addr); err != nil {
			if errors.Is(err, zk.ErrNoAdvertiseAddr) {
				return nil, fmt.Errorf("--advertise-addr is needed with --zk-addrs: this host has no non-loopback IPv4 address, " +
					"and 127.0.0.1:<port> is shared by every such host; set --advertise-addr to this instance's unique ip:port")
			}
			return nil, fmt.Errorf("--advertise-addr: %w", err)
		}
	}
	servers, chroot, err := zk.ParseConnect(cfg.ZKAddrs)
	if err != nil {
		return nil, fmt.Errorf("--zk-addrs: %w", err)
	}
	return zk.NewSource(zk.Config{
		Servers:         servers,
		Chroot:          chroot,
		Name:            cfg.Name,
		Addr:            addr,
		DataDir:         cfg.DataDir,
		Reuse:           cfg.WorkerReuse,
		OutageTolerance: cfg.ZKOutageTolerance,
		MaxWorkerID:     maxWorkerID,
		SessionTimeout:  cfg.ZKSession,
		Logger:          log.Named("zookeeper"),
	})
}
