package main

import (
	"fmt"
	"net"
	"sync"
	"syscall"

	"go.uber.org/zap"
)

// reservedFDs is what leafd keeps out of --maxclients' reach, as Redis keeps 32
// (CONFIG_MIN_RESERVED_FDS): standard streams, the two listeners, the poller, the embedded
// store or the marks file, the data dir's worker-id and time-bound files (the snowflake lease
// writes one every window), ZooKeeper's connection, and the RESP rejections being answered
// (16 at most, resp.maxRejecting). The MySQL pool and the admin connections come on top.
const reservedFDs = 32 + 16

// fdReserve is the descriptors leafd needs besides its RESP clients.
func fdReserve(cfg Config) int {
	n := reservedFDs
	if cfg.MySQLDSN != "" {
		n += cfg.MySQLMaxConns
	}
	if cfg.HTTPAddr != "" {
		n += cfg.HTTPMaxClients
	}
	return n
}

// fitMaxClients lowers cfg.MaxClients to what the open-file limit leaves after fdReserve,
// and says so as Redis does. (Go raises the soft limit to the hard one at start, so the
// limit read here is the most the process can have.) It fails when not even one client fits.
func fitMaxClients(cfg *Config, log *zap.Logger) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("cannot read the open-file limit; --maxclients not checked", zap.Error(err))
		return nil
	}
	reserve := fdReserve(*cfg)
	limit := int64(rl.Cur)
	if rl.Cur > 1<<31 {
		limit = 1 << 31
	}
	if int64(cfg.MaxClients+reserve) <= limit {
		return nil
	}
	fit := int(limit) - reserve
	if fit < 1 {
		return fmt.Errorf("the open-file limit (%d) leaves no room for clients after the %d descriptors leafd reserves; raise ulimit -n", limit, reserve)
	}
	log.Warn(fmt.Sprintf("You requested maxclients of %d requiring at least %d max file descriptors. Current maximum open files is %d. maxclients has been reduced to %d to compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'.",
		cfg.MaxClients, cfg.MaxClients+reserve, limit, fit),
		zap.Int("maxclients", fit), zap.Int("requested", cfg.MaxClients), zap.Int64("nofile", limit), zap.Int("reserved", reserve))
	cfg.MaxClients = fit
	return nil
}

// limitListener serves at most n connections at once: Accept waits for a slot, so the
// connections beyond it wait in the kernel's listen backlog and hold no descriptor of ours.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func newLimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
