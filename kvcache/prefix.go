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

// blockHash chains a block's hash over its parent's hash and its token ids: FNV-1a 64 taken a word
// (the parent's 64 bits, then each token's 32) at a time rather than a byte at a time. Hits do
// not rely on the hash being collision-free (see lookup), so it only has to spread well; it is
// computed for every block of a prompt each time the prompt's admission is tried.
func blockHash(parent uint64, tokens []int32) uint64 {
	h := (fnvOffset64 ^ parent) * fnvPrime64
	for _, t := range tokens {
		h ^= uint64(uint32(t))
		h *= fnvPrime64
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
// leaving at least the last token uncached. Each hit is confirmed, not just found by its hash: its
// token ids are the prompt's, and its parent block is the previous hit (the root for the first
// block). Since a registered block's parent stays registered as long as it does (see unregister),
// the hits hold exactly the KV of this prefix, even if two different prefixes' hashes collide.
func (p *Pool) lookup(tokens []int32) (hits []int32) {
	if !p.prefixCaching {
		return nil
	}
	maxHits := (len(tokens) - 1) / p.blockSize
	parent, parentBlock := p.rootHash(), int32(noBlock)
	for i := range maxHits {
		blockTokens := tokens[i*p.blockSize : (i+1)*p.blockSize]
		h := blockHash(parent, blockTokens)
		b, ok := p.byHash[h]
		if !ok || !p.matches(b, parentBlock, blockTokens) {
			break
		}
		hits = append(hits, b)
		parent, parentBlock = h, b
	}
	return hits
}

// matches confirms that registered block b continues the prefix ending at parentBlock with tokens.
func (p *Pool) matches(b, parentBlock int32, tokens []int32) bool {
	blk := &p.blocks[b]
	return blk.hashed && blk.parentBlock == parentBlock && slices.Equal(p.tokensOf(b), tokens)
}

// tokensOf returns the stored token ids of a registered block.
func (p *Pool) tokensOf(b int32) []int32 {
	return p.blockTokens[int(b)*p.blockSize : (int(b)+1)*p.blockSize]
}

// register enters the committed full blocks of s that are not in its chain yet in the prefix cache,
// each as a child of the chain's previous block. When the hash is already taken by an identical
// block (another sequence computed the same prefix at the same time), s's block stays private and
// the chain continues through the registered one. When it is taken by a different block (a hash
// collision), or the chain's previous block has been evicted since, the chain stops growing: the
// rest of s stays private, which costs hits, never correctness.
func (p *Pool) register(s *sequence) {
	full := s.committed / p.blockSize
	for i := len(s.chain); i < full && !s.broken; i++ {
		parent, parentBlock := p.rootHash(), int32(noBlock)
		if i > 0 {
			parentBlock = s.chain[i-1]
			pb := &p.blocks[parentBlock]
			if !pb.hashed || pb.gen != s.chainGen[i-1] {
				s.broken = true
				return
			}
			parent = pb.hash
		}
		blockTokens := s.tokens[i*p.blockSize : (i+1)*p.blockSize]
		h := blockHash(parent, blockTokens)
		b := s.tables[0][i]
		if b == NullBlock { // a sliding anchor page given back before it could join (not expected)
			s.broken = true
			return
		}
		if other, taken := p.byHash[h]; taken {
			if !p.matches(other, parentBlock, blockTokens) {
				s.broken = true
				return
			}
			s.chain = append(s.chain, other)
			s.chainGen = append(s.chainGen, p.blocks[other].gen)
			continue
		}
		blk := &p.blocks[b]
		p.lastGen++
		blk.hashed, blk.hash, blk.parent, blk.index, blk.gen = true, h, parent, int32(i), p.lastGen
		blk.parentBlock = parentBlock
		if parentBlock != noBlock {
			pb := &p.blocks[parentBlock]
			blk.nextSibling = pb.firstChild
			if pb.firstChild != noBlock {
				p.blocks[pb.firstChild].prevSibling = b
			}
			pb.firstChild = b
		}
		copy(p.tokensOf(b), blockTokens)
		p.byHash[h] = b
		s.chain = append(s.chain, b)
		s.chainGen = append(s.chainGen, blk.gen)
	}
}

// unregister removes an evicted block from the prefix cache, and with it every registered
// descendant and their twins: a block may only be hit through its parent, so once the parent is gone
// (and perhaps registered again with other content) its descendants must not be found any more.
// Descendants and twins nobody holds move from the evictable list to the free list; those still held
// become private. An evicted twin leaves alone.
func (p *Pool) unregister(b int32) {
	blk := &p.blocks[b]
	if !blk.hashed {
		return
	}
	if blk.twinOf != noBlock {
		p.unregisterTwin(b)
		return
	}
	if pb := blk.parentBlock; pb != noBlock {
		if blk.prevSibling != noBlock {
			p.blocks[blk.prevSibling].nextSibling = blk.nextSibling
		} else {
			p.blocks[pb].firstChild = blk.nextSibling
		}
		if blk.nextSibling != noBlock {
			p.blocks[blk.nextSibling].prevSibling = blk.prevSibling
		}
	}
	stack := append(p.scratch[:0], b)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		xb := &p.blocks[x]
		for c := xb.firstChild; c != noBlock; c = p.blocks[c].nextSibling {
			stack = append(stack, c)
		}
		p.dropTwins(x)
		delete(p.byHash, xb.hash)
		xb.hashed, xb.hash, xb.parent, xb.index, xb.gen = false, 0, 0, 0, 0
		if x != b && xb.ref == 0 {
			p.lruRemove(x)
			p.free = append(p.free, x)
		}
		xb.resetLinks()
	}
	p.scratch = stack
}

// resetLinks clears a block's LRU, prefix-tree and twin links.
func (blk *block) resetLinks() {
	blk.prev, blk.next = noBlock, noBlock
	blk.parentBlock, blk.firstChild, blk.prevSibling, blk.nextSibling = noBlock, noBlock, noBlock, noBlock
	blk.twinOf, blk.firstTwin, blk.nextTwin, blk.twinGroup, blk.twinGen = noBlock, noBlock, noBlock, 0, 0
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
