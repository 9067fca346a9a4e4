package client

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/redcon"
)

// fakeLeafd is a RESP server that answers the commands the client sends the way leafd does
// (INCRBY ranges, IDS.INFO, IDS.SNOWFLAKE), with hooks for the interleavings under test.
type fakeLeafd struct {
	addr string

	mu        sync.Mutex
	next      map[string]int64 // the next ID of each tag
	shaped    map[string]bool
	ordered   map[string]bool
	maxIncrBy int64 // INCRBY above it: LIMIT (0: any)
	maxBatch  int   // IDS.SNOWFLAKE above it: LIMIT (0: 1000)
	noTag     bool  // unknown tags: NOTAG (the server does not create on first use)
	fail      string
	counts    map[string]int // commands seen, by name
	sfNext    int64
	hold      chan struct{} // when set, INCRBY waits for it (a value or close) before answering
	arrived   chan int64    // when set, receives the count of every INCRBY as it arrives
	granted   [][2]int64    // every INCRBY range granted, [lo, hi]
}

func startFake(t *testing.T) *fakeLeafd {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLeafd{addr: ln.Addr().String(), next: map[string]int64{}, shaped: map[string]bool{},
		ordered: map[string]bool{}, counts: map[string]int{}, sfNext: 1 << 40}
	srv := redcon.NewServer(f.addr, f.serve, nil, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return f
}

func (f *fakeLeafd) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[name]
}

func (f *fakeLeafd) setFail(msg string) {
	f.mu.Lock()
	f.fail = msg
	f.mu.Unlock()
}

func (f *fakeLeafd) serve(c redcon.Conn, cmd redcon.Command) {
	name := strings.ToUpper(string(cmd.Args[0]))
	f.mu.Lock()
	f.counts[name]++
	fail, hold, arrived := f.fail, f.hold, f.arrived
	f.mu.Unlock()
	if fail != "" && name != "IDS.INFO" {
		c.WriteError(fail)
		return
	}
	switch name {
	case "IDS.INFO":
		tag := string(cmd.Args[1])
		f.mu.Lock()
		_, known := f.next[tag]
		shaped, ordered, mi := f.shaped[tag], f.ordered[tag], f.maxIncrBy
		f.mu.Unlock()
		if !known && !shaped && !ordered {
			c.WriteError("NOTAG tag '" + tag + "' does not exist")
			return
		}
		n := 4
		if shaped {
			n += 2
		}
		if ordered {
			n += 2
		}
		c.WriteArray(n)
		c.WriteBulkString("tag")
		c.WriteBulkString(tag)
		c.WriteBulkString("max_incrby")
		c.WriteInt64(mi)
		if shaped {
			c.WriteBulkString("format")
			c.WriteBulkString("ORD{seq:6}")
		}
		if ordered {
			c.WriteBulkString("ordered")
			c.WriteInt(1)
		}
	case "INCR", "INCRBY":
		tag := string(cmd.Args[1])
		n := int64(1)
		if name == "INCRBY" {
			n, _ = strconv.ParseInt(string(cmd.Args[2]), 10, 64)
			if arrived != nil {
				arrived <- n
			}
			if hold != nil {
				<-hold
			}
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.next[tag]; !ok {
			if f.noTag && !f.ordered[tag] {
				c.WriteError("NOTAG tag '" + tag + "' does not exist; create it with IDS.CREATE")
				return
			}
			f.next[tag] = 1
		}
		if f.maxIncrBy > 0 && n > f.maxIncrBy {
			c.WriteError("LIMIT INCRBY " + strconv.FormatInt(n, 10) + " is more than the tag serves contiguously now")
			return
		}
		lo := f.next[tag]
		f.next[tag] += n
		f.granted = append(f.granted, [2]int64{lo, lo + n - 1})
		c.WriteInt64(lo + n - 1)
	case "IDS.SNOWFLAKE":
		n, _ := strconv.Atoi(string(cmd.Args[1]))
		f.mu.Lock()
		defer f.mu.Unlock()
		mb := f.maxBatch
		if mb == 0 {
			mb = 1000
		}
		if n > mb {
			c.WriteError("LIMIT count must be between 1 and " + strconv.Itoa(mb))
			return
		}
		c.WriteArray(n)
		for range n {
			f.sfNext++
			c.WriteInt64(f.sfNext)
		}
	default:
		c.WriteError("ERR unknown command '" + name + "'")
	}
}
