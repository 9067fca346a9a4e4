package main

import (
	"context"
	"fmt"
	"net"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/segment/mysqlstore"
	"go.uber.org/zap"
)

// openOrdered builds the ORDERED tags' manager and forwarder for the store: on MySQL the
// leases of leafd_leader and a forwarder to the leaders; on the embedded store (a single
// instance) a local manager that serves every ordered tag here. nil, nil without a segment
// store (--modes snowflake).
func openOrdered(ctx context.Context, cfg Config, store segment.Store, log *zap.Logger) (*ordered.Manager, *ordered.Forwarder, error) {
	log = log.Named("ordered")
	switch st := store.(type) {
	case *boltstore.BoltStore:
		m, err := ordered.NewManager(ordered.ManagerConfig{Local: true, Length: cfg.OrderedLease, Log: log}, st, nil)
		return m, nil, err
	case *mysqlstore.MySQLStore:
		holder, err := orderedHolder(cfg)
		if err != nil {
			// Ordinary tags are unaffected; an ordered tag led here cannot be forwarded to.
			log.Warn("no address to advertise for ORDERED tags; set --advertise-addr", zap.Error(err))
			holder = cfg.Addr
		}
		leases := ordered.NewMySQLLeases(st.DB(), cfg.LoadTimeout)
		leases.SetCluster(st.Cluster())
		if !cfg.MySQLCreate {
			leases.AssumeTable() // created from docs/schema.sql; the user may lack CREATE
		} else if err := leases.EnsureTable(ctx); err != nil {
			log.Warn("cannot create leafd_leader yet; retried with the list of ordered tags", zap.Error(err))
		}
		m, err := ordered.NewManager(ordered.ManagerConfig{Holder: holder, Length: cfg.OrderedLease, Log: log}, leases, leases)
		if err != nil {
			return nil, nil, fmt.Errorf("--ordered-lease: %w", err)
		}
		f := ordered.NewForwarder(ordered.ForwarderConfig{Password: cfg.RequirePass, Timeout: cfg.OrderedLease / 3, Log: log})
		log.Info("ordered tags: leader lease", zap.String("advertise_addr", holder), zap.Duration("lease", cfg.OrderedLease))
		return m, f, nil
	}
	return nil, nil, nil
}

// orderedHolder is the address the other instances forward this one's ordered tags to:
// --advertise-addr, else the listen address with the port bound (a wildcard host replaced by
// the first non-loopback IPv4 address).
func orderedHolder(cfg Config) (string, error) {
	if cfg.AdvertiseAddr != "" {
		return cfg.AdvertiseAddr, nil
	}
	addr := cfg.Addr
	if cfg.boundAddr != "" {
		addr = cfg.boundAddr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--addr %q: %w", addr, err)
	}
	if port == "0" {
		return "", fmt.Errorf("--addr %q has no fixed port: set --advertise-addr, the address other instances forward ORDERED tags to", addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return defaultAdvertiseAddr(addr)
	}
	return addr, nil
}
