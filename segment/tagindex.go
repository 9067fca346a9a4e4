package segment

import (
	"hash/maphash"
	"sync/atomic"
)

// tagIndex maps a tag to its live buffer. The hot path (Next) reads it
// without a lock and without allocating; adding or removing a tag writes it under
// Generator.mu only.
//
// It is not a sync.Map, whose hash trie costs a dependent cache miss per level (four or five
// with 100,000 tags) plus one for the key's bytes: round-robin INCR over 100,000 tags would
// pay them on every request. Here a lookup hashes the name once, picks one of tagShards shards
// by the hash's top bits (the shard pointers stay in cache), and probes an open-addressing
// table whose slots hold the full hash beside the buffer pointer, so a lookup reads one slot
// line, then the buffer's first line, where the name sits inline (buffer.name) next to cur.
//
// Each shard grows by doubling, copied under Generator.mu into a new table that is then
// published by one atomic store: adding a tag is O(1) amortized, and the worst case copies
// one shard (about 2·held/tagShards slots), never the whole index.
//
// Consistency: a slot is written buffer first, hash second, and a reader only returns a
// buffer whose own name equals the key, so a torn read is at worst a miss. A reader holding a
// shard that was just replaced may miss a tag added after the copy, or find a buffer dropped
// after it (like a sync.Map reader that loaded the buffer just before its Delete). A miss
// only sends the caller to the slow path, which looks again under Generator.mu (addLocked);
// a dropped buffer is dead before it leaves the index (drop).
type tagIndex struct {
	seed   maphash.Seed
	shards [tagShards]atomic.Pointer[tagShard]
}

const (
	tagShardBits = 8
	tagShards    = 1 << tagShardBits
	tagShardMin  = 8 // slots of a new shard
)

// tagShard is one open-addressing table with linear probing. Its slots are never reused
// once written: a removed tag leaves a tombstone (hash kept, buffer nil) until the shard is
// rebuilt, so a probe sequence is never broken under a concurrent reader.
type tagShard struct {
	slots []tagSlot // a power of two long; always at least one empty slot
	used  int       // slots written (live + tombstones); Generator.mu
	live  int       // slots holding a buffer; Generator.mu
}

// tagSlot: hash 0 is an empty slot (hashes are stored with their low bit set).
type tagSlot struct {
	hash atomic.Uint64
	buf  atomic.Pointer[buffer]
}

func newTagIndex() *tagIndex {
	x := &tagIndex{seed: maphash.MakeSeed()}
	for i := range x.shards {
		x.shards[i].Store(&tagShard{slots: make([]tagSlot, tagShardMin)})
	}
	return x
}

func (x *tagIndex) hash(tag string) uint64 { return maphash.String(x.seed, tag) | 1 }

// load returns the buffer of tag, or nil.
func (x *tagIndex) load(tag string) *buffer { return x.lookup(x.hash(tag), tag) }

// lookup returns the buffer of tag, whose hash is h, or nil.
func (x *tagIndex) lookup(h uint64, tag string) *buffer {
	sh := x.shards[h>>(64-tagShardBits)].Load()
	mask := uint64(len(sh.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &sh.slots[i]
		switch s.hash.Load() {
		case 0:
			return nil
		case h:
			if b := s.buf.Load(); b != nil && b.tag == tag {
				return b
			}
		}
	}
}

// store adds b under b.tag, which is not in the index (Generator.mu held).
func (x *tagIndex) store(b *buffer) {
	h := x.hash(b.tag)
	p := &x.shards[h>>(64-tagShardBits)]
	sh := p.Load()
	if (sh.used+1)*4 > len(sh.slots)*3 { // keep the load factor at most 3/4
		n := len(sh.slots)
		for (sh.live+1)*2 > n { // after the copy, at most half full
			n *= 2
		}
		sh = sh.rebuilt(n)
		p.Store(sh)
	}
	sh.put(h, b)
}

// put writes b into the first empty slot of h's probe sequence.
func (sh *tagShard) put(h uint64, b *buffer) {
	mask := uint64(len(sh.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &sh.slots[i]
		if s.hash.Load() == 0 {
			s.buf.Store(b)
			s.hash.Store(h)
			sh.used++
			sh.live++
			return
		}
	}
}

// rebuilt returns a new shard of n slots holding sh's live buffers (Generator.mu held).
func (sh *tagShard) rebuilt(n int) *tagShard {
	out := &tagShard{slots: make([]tagSlot, n)}
	for i := range sh.slots {
		if b := sh.slots[i].buf.Load(); b != nil {
			out.put(sh.slots[i].hash.Load(), b)
		}
	}
	return out
}

// remove takes b out of the index if it is there (Generator.mu held); it reports whether it
// was.
func (x *tagIndex) remove(b *buffer) bool {
	h := x.hash(b.tag)
	sh := x.shards[h>>(64-tagShardBits)].Load()
	mask := uint64(len(sh.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &sh.slots[i]
		switch s.hash.Load() {
		case 0:
			return false
		case h:
			if s.buf.Load() == b {
				s.buf.Store(nil) // a tombstone: the hash stays, so probes go on past it
				sh.live--
				return true
			}
		}
	}
}

// each calls f with every buffer in the index until f returns false. Like sync.Map.Range it
// is not a snapshot: buffers added or removed meanwhile may be seen or not.
func (x *tagIndex) each(f func(b *buffer) bool) {
	for i := range x.shards {
		sh := x.shards[i].Load()
		for j := range sh.slots {
			if b := sh.slots[j].buf.Load(); b != nil && !f(b) {
				return
			}
		}
	}
}
