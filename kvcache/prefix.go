package kvcache

import "slices"

// FNV-1a 64-bit parameters.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// rootHash returns the parent hash of a sequence's first block.
func (p *Pool) rootHash() uint64 {
	return mix64(fnvOffset64, p.seed)
}

// blockHash chains a block's hash over its parent's hash and its token ids (FNV-1a 64 over the
// little-endian bytes, seeded through the root hash).
func blockHash(parent uint64, tokens []int32) uint64 {
	h := mix64(fnvOffset64, parent)
	for _, t := range tokens {
		u := uint32(t)
		for range 4 {
			h ^= uint64(u & 0xff)
			h *= fnvPrime64
			u >>= 8
		}
	}
	return h
}

// mix64 feeds the 8 bytes of v into the FNV-1a state h.
func mix64(h, v uint64) uint64 {
	for range 8 {
		h ^= v & 0xff
		h *= fnvPrime64
		v >>= 8
	}
	return h
}

// lookup returns the registered blocks that hold the longest prefix of tokens made of full blocks,
// leaving at least the last token uncached, and the chained hashes of those blocks.
func (p *Pool) lookup(tokens []int32) (hits []int32, hashes []uint64) {
	if !p.prefixCaching {
		return nil, nil
	}
	maxHits := (len(tokens) - 1) / p.blockSize
	parent := p.rootHash()
	for i := range maxHits {
		blockTokens := tokens[i*p.blockSize : (i+1)*p.blockSize]
		h := blockHash(parent, blockTokens)
		b, ok := p.byHash[h]
		if !ok || !p.matches(b, parent, i, blockTokens) {
			break
		}
		hits = append(hits, b)
		hashes = append(hashes, h)
		parent = h
	}
	return hits, hashes
}

// matches confirms a hash hit: same parent, same place in the sequence, same token ids.
func (p *Pool) matches(b int32, parent uint64, index int, tokens []int32) bool {
	blk := &p.blocks[b]
	return blk.hashed && blk.parent == parent && int(blk.index) == index &&
		slices.Equal(p.tokensOf(b), tokens)
}

// tokensOf returns the stored token ids of a registered block.
func (p *Pool) tokensOf(b int32) []int32 {
	return p.blockTokens[int(b)*p.blockSize : (int(b)+1)*p.blockSize]
}

// register hashes the committed full blocks of s that have no hash yet and enters them in the
// prefix cache. A block whose hash is already taken (another sequence computed the same prefix at
// the same time, or a collision) stays private; the chain of hashes continues regardless.
func (p *Pool) register(s *sequence) {
	full := s.committed / p.blockSize
	for i := len(s.hashes); i < full; i++ {
		parent := p.rootHash()
		if i > 0 {
			parent = s.hashes[i-1]
		}
		blockTokens := s.tokens[i*p.blockSize : (i+1)*p.blockSize]
		h := blockHash(parent, blockTokens)
		s.hashes = append(s.hashes, h)
		b := s.table[i]
		blk := &p.blocks[b]
		if blk.hashed {
			continue // shared from the cache already
		}
		if _, taken := p.byHash[h]; taken {
			continue
		}
		blk.hashed, blk.hash, blk.parent, blk.index = true, h, parent, int32(i)
		copy(p.tokensOf(b), blockTokens)
		p.byHash[h] = b
	}
}

// unregister removes an evicted block from the prefix cache.
func (p *Pool) unregister(b int32) {
	blk := &p.blocks[b]
	if !blk.hashed {
		return
	}
	if p.byHash[blk.hash] == b {
		delete(p.byHash, blk.hash)
	}
	blk.hashed, blk.hash, blk.parent, blk.index = false, 0, 0, 0
}

// lruPushBack makes b the most recently used evictable block.
func (p *Pool) lruPushBack(b int32) {
	blk := &p.blocks[b]
	blk.prev, blk.next = p.lruTail, noBlock
	if p.lruTail != noBlock {
		p.blocks[p.lruTail].next = b
	} else {
		p.lruHead = b
	}
	p.lruTail = b
	p.numCached++
}

// lruRemove unlinks b from the evictable list.
func (p *Pool) lruRemove(b int32) {
	blk := &p.blocks[b]
	if blk.prev != noBlock {
		p.blocks[blk.prev].next = blk.next
	} else {
		p.lruHead = blk.next
	}
	if blk.next != noBlock {
		p.blocks[blk.next].prev = blk.prev
	} else {
		p.lruTail = blk.prev
	}
	blk.prev, blk.next = noBlock, noBlock
	p.numCached--
}
