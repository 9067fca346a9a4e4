package segment

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// Two names with one hash: each lookup finds its own buffer (the name is compared, not only
// the hash), and removing one leaves the other reachable past its tombstone.
func TestTagIndexCollision(t *testing.T) {
	x := newTagIndex()
	sh := x.shards[0].Load()
	const h = 1 // shard 0, slot 1
	a, b, c := newBuffer("a"), newBuffer("b"), newBuffer("c")
	sh.put(h, a)
	sh.put(h, b)
	sh.put(h+2, c) // lands after b: a probe of h passes it
	if got := x.lookup(h, "b"); got != b {
		t.Fatalf("got %p for b, want %p", got, b)
	}
	if got := x.lookup(h, "a"); got != a {
		t.Fatalf("got %p for a, want %p", got, a)
	}
	if got := x.lookup(h, "c"); got != nil {
		t.Fatalf("got %p for c under a's hash, want nil", got)
	}
	// remove finds a slot by hash; with a chosen hash, tombstone a by hand as remove does.
	sh.slots[h].buf.Store(nil)
	if got := x.lookup(h, "b"); got != b {
		t.Fatalf("after removing a: got %p for b, want %p", got, b)
	}
	if got := x.lookup(h, "a"); got != nil {
		t.Fatalf("after removing a: got %p for a, want nil", got)
	}
}

// Adding, removing and adding again many names: every held name is found, every removed one
// is not, the count of live slots matches, and shards grow (and shed tombstones) as they fill.
func TestTagIndexChurn(t *testing.T) {
	x := newTagIndex()
	held := map[string]*buffer{}
	name := func(i int) string { return fmt.Sprintf("tag-%d", i) }
	long := strings.Repeat("x", tagInline+5)
	for round := range 3 {
		for i := range 5000 {
			n := name(i)
			if i%7 == 0 {
				n = long + n // a name longer than the inline bytes
			}
			if _, ok := held[n]; ok {
				continue
			}
			b := newBuffer(n)
			x.store(b)
			held[n] = b
		}
		k := 0
		for n, b := range held {
			if k%3 == round%3 {
				if !x.remove(b) {
					t.Fatalf("round %d: remove(%q) = false, want true", round, n)
				}
				if x.remove(b) {
					t.Fatalf("round %d: second remove(%q) = true, want false", round, n)
				}
				delete(held, n)
				if got := x.load(n); got != nil {
					t.Fatalf("round %d: %q found after remove", round, n)
				}
			}
			k++
		}
		for n, b := range held {
			if got := x.load(n); got != b {
				t.Fatalf("round %d: load(%q) = %p, want %p", round, n, got, b)
			}
		}
		live, seen := 0, 0
		for i := range x.shards {
			sh := x.shards[i].Load()
			live += sh.live
			if sh.used >= len(sh.slots) {
				t.Fatalf("shard %d: %d of %d slots used: no empty slot left", i, sh.used, len(sh.slots))
			}
		}
		x.each(func(*buffer) bool { seen++; return true })
		if live != len(held) || seen != len(held) {
			t.Fatalf("round %d: %d live slots, each saw %d, want %d", round, live, seen, len(held))
		}
	}
	if got := x.load("never-added"); got != nil {
		t.Fatalf("got %p for a name never added", got)
	}
}

// Readers racing with adds, removes and shard rebuilds (go test -race): a held name is always
// found, since a rebuild publishes a complete copy before later writes go to it.
func TestTagIndexConcurrentReaders(t *testing.T) {
	x := newTagIndex()
	var mu sync.Mutex // Generator.mu
	stable := make([]*buffer, 200)
	for i := range stable {
		stable[i] = newBuffer(fmt.Sprintf("stable-%d", i))
		x.store(stable[i])
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, b := range stable {
					if got := x.load(b.tag); got != b {
						t.Errorf("load(%q) = %p during churn, want %p", b.tag, got, b)
						return
					}
				}
			}
		}()
	}
	for i := range 20000 {
		b := newBuffer(fmt.Sprintf("churn-%d", i))
		mu.Lock()
		x.store(b)
		if i%2 == 0 {
			x.remove(b)
		}
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
}

// The fields a lookup and a take read (cur, flags, the name's header and its inline bytes)
// lie in the first 64 bytes of a buffer (docs/SEGMENT.md).
func TestBufferHotFieldsOneLine(t *testing.T) {
	var b buffer
	if end := unsafe.Offsetof(b.name) + unsafe.Sizeof(b.name); end > 64 {
		t.Fatalf("hot fields end at byte %d, want <= 64", end)
	}
}
