package zk

import (
	"fmt"
	"net"
	"strings"
)

// ParseConnect splits a ZooKeeper connection string, "host:port[,host:port...][/chroot]" (the
// form of ZooKeeper's own client, Curator and Leaf's leaf.zk.list), into the server addresses
// and the chroot ("" for none). With a chroot, every path leafd uses lives below it, as it would
// for ZooKeeper's Java client; the chroot node is created when missing.
func ParseConnect(s string) (servers []string, chroot string, err error) {
	hosts := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		hosts, chroot = s[:i], s[i:]
		if err := validChroot(chroot); err != nil {
			return nil, "", fmt.Errorf("ZooKeeper connection string %q: %w", s, err)
		}
		if chroot == "/" {
			chroot = ""
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, "2181") // ZooKeeper's default port, as its client assumes
		}
		servers = append(servers, h)
	}
	if len(servers) == 0 {
		return nil, "", fmt.Errorf("ZooKeeper connection string %q names no server", s)
	}
	return servers, chroot, nil
}

func validChroot(c string) error {
	if c == "/" {
		return nil
	}
	if !strings.HasPrefix(c, "/") || strings.HasSuffix(c, "/") {
		return fmt.Errorf("chroot %q must start with '/' and not end with it", c)
	}
	for _, p := range strings.Split(c[1:], "/") {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, " \t,") {
			return fmt.Errorf("chroot %q has an invalid path element %q", c, p)
		}
	}
	return nil
}
