package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	gozk "github.com/go-zookeeper/zk"
)

// zkNode is the JSON of a forever node: exactly Leaf's Endpoint (ip and port are strings there,
// timestamp a long), so that Leaf can read every node leafd writes.
type zkNode struct {
	IP        string `json:"ip"`
	Port      string `json:"port"`
	Timestamp int64  `json:"timestamp"`
}

// foreverData is how a forever node is read: Leaf's fields, and the reserved_until that earlier
// leafd versions kept there (honoured as a bound when adopting such a tree).
type foreverData struct {
	zkNode
	LegacyReservedUntil int64 `json:"reserved_until,omitempty"`
}

func (s *Source) forever() string { return s.root + "/forever" }

// parseNodeName splits "<ip>:<port>-<seq>".
func parseNodeName(name string) (addr string, seq int64, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || seq < 0 {
		return "", 0, false
	}
	return name[:i], seq, true
}

func (s *Source) ensurePaths(ctx context.Context) error {
	var ps []string
	if s.cfg.Chroot != "" {
		parts := strings.Split(s.cfg.Chroot[1:], "/")
		for i := range parts {
			ps = append(ps, "/"+strings.Join(parts[:i+1], "/"))
		}
	}
	ps = append(ps, s.cfg.Chroot+"/snowflake", s.root, s.forever(), s.root+"/live", s.root+"/state")
	for _, p := range ps {
		_, err := call(s, ctx, func() (string, error) { return s.conn.Create(p, nil, 0, gozk.WorldACL(gozk.PermAll)) })
		if err != nil && !errors.Is(err, gozk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

type foreverChild struct {
	name string
	addr string
	id   int64
}

func (s *Source) children(ctx context.Context) ([]foreverChild, error) {
	names, err := call(s, ctx, func() ([]string, error) {
		c, _, err := s.conn.Children(s.forever())
		return c, err
	})
	if err != nil {
		return nil, err
	}
	var out []foreverChild
	for _, n := range names {
		if addr, id, ok := parseNodeName(n); ok {
			out = append(out, foreverChild{n, addr, id})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}

func (s *Source) getForever(ctx context.Context, path string) (foreverData, error) {
	return call(s, ctx, func() (foreverData, error) {
		b, _, err := s.conn.Get(path)
		if err != nil {
			return foreverData{}, err
		}
		var n foreverData
		if len(b) > 0 {
			if err := json.Unmarshal(b, &n); err != nil {
				return foreverData{}, fmt.Errorf("snowflake: node %s: bad JSON: %w", path, err)
			}
		}
		return n, nil
	})
}

// createNode creates our persistent sequential node (Leaf's data only) and parses the worker id
// from its name, on the first start too (Leaf PR #108 returned 0 there). Ids above the maximum
// are deleted and reported as exhaustion.
func (s *Source) createNode(ctx context.Context) (*claim, error) {
	now := s.cfg.Clock.Now().UnixMilli()
	b, _ := json.Marshal(zkNode{IP: s.ip, Port: s.port, Timestamp: now})
	path, err := call(s, ctx, func() (string, error) {
		return s.conn.Create(s.forever()+"/"+s.cfg.Addr+"-", b, gozk.FlagSequence, gozk.WorldACL(gozk.PermAll))
	})
	if err != nil {
		return nil, err
	}
	_, id, ok := parseNodeName(path[strings.LastIndexByte(path, '/')+1:])
	if !ok {
		return nil, fmt.Errorf("snowflake: unexpected sequential node name %q", path)
	}
	if id > s.cfg.MaxWorkerID {
		_, _ = call(s, ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(path, -1) })
		return nil, fmt.Errorf("snowflake: new worker id %d is above the layout's maximum %d: "+
			"the worker ids of /snowflake/%s are exhausted (use a new --name, more worker bits, or --worker-reuse)",
			id, s.cfg.MaxWorkerID, s.cfg.Name)
	}
	s.reported = now
	return &claim{id: id, path: path, how: "new node", fresh: true}, nil
}

// reportLocked refreshes the forever node's timestamp with Leaf's data only. Like Leaf, it skips
// a report when the clock is behind the last one. The state node records the timestamp first,
// so that a later timestamp in the forever node can only have been written by someone else
// (Leaf, see fence).
func (s *Source) reportLocked(ctx context.Context) error {
	now := s.cfg.Clock.Now().UnixMilli()
	if now < s.reported {
		return nil
	}
	s.reported = now
	if err := s.writeStateLocked(ctx, s.zkUntil, s.tolerance); err != nil {
		return err
	}
	n := zkNode{IP: s.ip, Port: s.port, Timestamp: now}
	if ip, port, err := net.SplitHostPort(s.nodeAddr()); err == nil {
		n.IP, n.Port = ip, port // keep Leaf's view of the node: the identity in its name
	}
	b, _ := json.Marshal(n)
	_, err := call(s, ctx, func() (*gozk.Stat, error) { return s.conn.Set(s.node, b, -1) })
	return err
}

func (s *Source) nodeAddr() string {
	addr, _, _ := parseNodeName(s.node[strings.LastIndexByte(s.node, '/')+1:])
	return addr
}

// ErrNoAdvertiseAddr: the host has no non-loopback IPv4 address to derive an identity from.
var ErrNoAdvertiseAddr = errors.New("snowflake: no non-loopback IPv4 address to advertise")

// DefaultAdvertiseAddr returns the identity Leaf would use for listenAddr: the first
// non-loopback IPv4 address of an up interface, with listenAddr's port. On a host without one it
// fails with ErrNoAdvertiseAddr rather than fall back to 127.0.0.1, which every such host (and
// container) shares.
func DefaultAdvertiseAddr(listenAddr string) (string, error) {
	_, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", fmt.Errorf("snowflake: listen address %q: %w", listenAddr, err)
	}
	if port == "" || port == "0" {
		return "", fmt.Errorf("snowflake: listen address %q has no fixed port", listenAddr)
	}
	ifs, err := net.Interfaces()
	if err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				ipn, ok := a.(*net.IPNet)
				if !ok {
					continue
				}
				if ip4 := ipn.IP.To4(); ip4 != nil && !ip4.IsLoopback() && !ip4.IsLinkLocalUnicast() {
					return net.JoinHostPort(ip4.String(), port), nil
				}
			}
		}
	}
	return "", ErrNoAdvertiseAddr
}
