package kvcache

import (
	"errors"
	"fmt"
)

// Stats is a snapshot of a pool's occupancy and prefix-cache effectiveness.
// TotalBlocks == UsedBlocks + CachedBlocks + FreeBlocks.
type Stats struct {
	TotalBlocks  int // blocks in the pool
	UsedBlocks   int // blocks held by at least one sequence
	CachedBlocks int // blocks held by none but kept in the prefix cache (evictable, LRU)
	FreeBlocks   int // blocks holding nothing reusable
	SharedBlocks int // used blocks held by more than one sequence

	QueriedTokens int64 // tokens passed to successful Allocate calls
	HitTokens     int64 // of those, tokens whose KV came from the prefix cache
}

// HitRate returns HitTokens / QueriedTokens, or 0 before any query.
func (s Stats) HitRate() float64 {
	if s.QueriedTokens == 0 {
		return 0
	}
	return float64(s.HitTokens) / float64(s.QueriedTokens)
}

// Stats returns the pool's current statistics. It costs O(1): the engine calls it every step.
func (p *Pool) Stats() Stats {
	return Stats{
		TotalBlocks:   len(p.blocks),
		UsedBlocks:    p.numUsed,
		CachedBlocks:  p.numCached,
		FreeBlocks:    len(p.free),
		SharedBlocks:  p.numShared,
		QueriedTokens: p.queriedTokens,
		HitTokens:     p.hitTokens,
	}
}

// CheckInvariants verifies the pool's internal consistency and returns an error describing every
// violation found (nil if none): reference counts equal the number of tables holding each block;
// every block is exactly one of used, cached (registered, in the LRU list) or free; the counters
// match; the hash index and the registered blocks agree; every registered block's parent block is
// registered and lists it as a child; twins and their anchors agree; table lengths match token
// counts, and sliding groups hold no page behind their windows and every page after; and no registered
// block is a sequence's writable last block. It is meant for tests and costs
// O(blocks + table entries).
func (p *Pool) CheckInvariants() error {
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf("kvcache: invariant: "+format, args...))
		}
	}
	n := len(p.blocks)

	refs := make([]int32, n)
	groupOf := make([]int, n) // 1 + the group whose tables hold the block
	for id, s := range p.seqs {
		if len(s.tables) != len(p.groups) {
			fail("sequence %d: %d block tables for %d groups", id, len(s.tables), len(p.groups))
			continue
		}
		if s.committed > len(s.tokens) {
			fail("sequence %d: %d committed of %d tokens", id, s.committed, len(s.tokens))
		}
		if len(s.chain) != len(s.chainGen) || len(s.chain) > s.committed/p.blockSize {
			fail("sequence %d: chain of %d blocks (%d generations) but only %d committed tokens", id, len(s.chain), len(s.chainGen), s.committed)
		}
		seen := make(map[int32]bool)
		for g, table := range s.tables {
			if want := BlocksFor(len(s.tokens), p.blockSize); len(table) != want {
				fail("sequence %d: group %d: %d tokens in %d blocks, want %d", id, g, len(s.tokens), len(table), want)
			}
			// A sliding group holds no page behind its window, and every page after it; the others
			// hold every page.
			behind := 0
			if p.groups[g].Window > 0 {
				behind = s.behind[g]
				if lo := min(p.firstNeeded(g, s.committed), len(table)); behind != lo {
					fail("sequence %d: group %d holds pages from %d, its window from %d", id, g, behind, lo)
				}
			}
			for i, b := range table {
				if b == NullBlock {
					if i >= behind {
						fail("sequence %d: group %d: no block at page %d, in the window", id, g, i)
					}
					continue
				}
				if i < behind {
					fail("sequence %d: group %d: block %d at page %d, behind the window", id, g, b, i)
				}
				if b < 0 || int(b) >= n {
					fail("sequence %d: block id %d out of range", id, b)
					continue
				}
				if seen[b] {
					fail("sequence %d: block %d twice in its tables", id, b)
				}
				seen[b] = true
				refs[b]++
				if groupOf[b] != 0 && groupOf[b] != g+1 {
					fail("block %d held in groups %d and %d", b, groupOf[b]-1, g)
				}
				groupOf[b] = g + 1
				blk := &p.blocks[b]
				if blk.hashed && int(blk.index) != i {
					fail("sequence %d: registered block %d at table index %d, registered at %d", id, b, i, blk.index)
				}
				if blk.hashed && (i+1)*p.blockSize > s.committed {
					fail("sequence %d: registered block %d at index %d is not fully committed (%d)", id, b, i, s.committed)
				}
				if blk.hashed && (g == 0) != (blk.twinOf == noBlock) {
					fail("sequence %d: group %d holds block %d registered as a twin %v", id, g, b, blk.twinOf != noBlock)
				}
			}
		}
	}

	inFree := make([]bool, n)
	for _, b := range p.free {
		if inFree[b] {
			fail("block %d twice in the free list", b)
		}
		inFree[b] = true
	}
	inLRU := make([]bool, n)
	count, prev := 0, int32(noBlock)
	for b := p.lruHead; b != noBlock && count <= n; b = p.blocks[b].next {
		if p.blocks[b].prev != prev {
			fail("LRU link broken at block %d", b)
		}
		inLRU[b] = true
		prev = b
		count++
	}
	if prev != p.lruTail {
		fail("LRU tail is %d, list ends at %d", p.lruTail, prev)
	}
	if count != p.numCached {
		fail("LRU holds %d blocks, counter says %d", count, p.numCached)
	}

	used, cached, free, shared := 0, 0, 0, 0
	children := make([]int, n) // child-list entries less parent links, per block
	for b := range n {
		blk := &p.blocks[b]
		if blk.ref != refs[b] {
			fail("block %d: ref %d, held by %d tables", b, blk.ref, refs[b])
		}
		switch {
		case blk.ref > 0:
			used++
			if blk.ref > 1 {
				shared++
			}
			if inFree[b] || inLRU[b] {
				fail("used block %d is also free (%v) or cached (%v)", b, inFree[b], inLRU[b])
			}
		case blk.hashed:
			cached++
			if !inLRU[b] || inFree[b] {
				fail("cached block %d: in LRU %v, in free list %v", b, inLRU[b], inFree[b])
			}
		default:
			free++
			if !inFree[b] || inLRU[b] {
				fail("free block %d: in free list %v, in LRU %v", b, inFree[b], inLRU[b])
			}
		}
		if blk.hashed && blk.twinOf != noBlock {
			a := blk.twinOf
			key := twinKey{blk.twinGroup, a, blk.twinGen}
			listed := false
			if a >= 0 && int(a) < n {
				for c := p.blocks[a].firstTwin; c != noBlock && !listed; c = p.blocks[c].nextTwin {
					listed = c == int32(b)
				}
			}
			switch {
			case !p.prefixCaching:
				fail("block %d registered with prefix caching off", b)
			case a < 0 || int(a) >= n || !p.blocks[a].hashed || p.blocks[a].twinOf != noBlock || p.blocks[a].gen != blk.twinGen:
				fail("twin %d: its anchor %d is not the registered anchor block it was made for", b, a)
			case p.twins[key] != int32(b):
				fail("twin %d: the twin index has %d under its key", b, p.twins[key])
			case !listed:
				fail("twin %d: not in anchor %d's list", b, a)
			case blk.twinGroup < 1 || int(blk.twinGroup) >= len(p.groups) || (groupOf[b] != 0 && groupOf[b] != int(blk.twinGroup)+1):
				fail("twin %d: group %d", b, blk.twinGroup)
			case blk.parentBlock != noBlock || blk.firstChild != noBlock:
				fail("twin %d has prefix-tree links", b)
			}
		} else if blk.hashed {
			if !p.prefixCaching {
				fail("block %d registered with prefix caching off", b)
			}
			if got, ok := p.byHash[blk.hash]; !ok || got != int32(b) {
				fail("registered block %d: hash index points to %d (present %v)", b, got, ok)
			}
			if h := blockHash(blk.parent, p.tokensOf(int32(b))); h != blk.hash {
				fail("registered block %d: stored hash %#x, tokens hash to %#x", b, blk.hash, h)
			}
			if pb := blk.parentBlock; pb == noBlock {
				if blk.index != 0 || blk.parent != p.rootHash() {
					fail("registered block %d: no parent block at index %d", b, blk.index)
				}
			} else if pb < 0 || int(pb) >= n || !p.blocks[pb].hashed || p.blocks[pb].hash != blk.parent || p.blocks[pb].index+1 != blk.index {
				fail("registered block %d: parent block %d is not the registered block of its parent hash", b, pb)
			}
			for c := blk.firstChild; c != noBlock; c = p.blocks[c].nextSibling {
				if c < 0 || int(c) >= n || p.blocks[c].parentBlock != int32(b) || !p.blocks[c].hashed {
					fail("registered block %d: child %d does not name it as its parent", b, c)
					break
				}
				children[b]++
			}
			for c := blk.firstTwin; c != noBlock; c = p.blocks[c].nextTwin {
				if c < 0 || int(c) >= n || p.blocks[c].twinOf != int32(b) || !p.blocks[c].hashed {
					fail("registered block %d: twin %d does not name it as its anchor", b, c)
					break
				}
			}
		} else if blk.parentBlock != noBlock || blk.firstChild != noBlock || blk.prevSibling != noBlock || blk.nextSibling != noBlock ||
			blk.twinOf != noBlock || blk.firstTwin != noBlock {
			fail("unregistered block %d keeps prefix-tree or twin links", b)
		}
	}
	for b := range n {
		if pb := p.blocks[b].parentBlock; p.blocks[b].hashed && pb != noBlock && pb >= 0 && int(pb) < n {
			children[pb]--
		}
	}
	for b, c := range children {
		if c != 0 {
			fail("block %d: its child list and its children's parent links disagree by %d", b, c)
		}
	}
	if used != p.numUsed || cached != p.numCached || free != len(p.free) || shared != p.numShared {
		fail("counters used/cached/free/shared %d/%d/%d/%d, counted %d/%d/%d/%d",
			p.numUsed, p.numCached, len(p.free), p.numShared, used, cached, free, shared)
	}
	if used+cached+free != n {
		fail("used %d + cached %d + free %d != total %d", used, cached, free, n)
	}
	for key, t := range p.twins {
		if t < 0 || int(t) >= n || !p.blocks[t].hashed || p.blocks[t].twinOf != key.anchor || p.blocks[t].twinGen != key.gen || p.blocks[t].twinGroup != key.group {
			fail("twin index entry %+v points to block %d which is not that twin", key, t)
		}
	}
	for h, b := range p.byHash {
		if b < 0 || int(b) >= n || !p.blocks[b].hashed || p.blocks[b].hash != h {
			fail("hash index entry %#x points to block %d which is not registered under it", h, b)
		}
	}
	if len(p.seqs) == 0 && used != 0 {
		fail("%d blocks held with no sequence allocated", used)
	}
	if p.hitTokens > p.queriedTokens {
		fail("hit tokens %d exceed queried tokens %d", p.hitTokens, p.queriedTokens)
	}
	return errors.Join(errs...)
}
