package kvcache

import "slices"

// This file holds what KV groups add to the pool: the prefix-cache lookup across groups, the twins
// that register the blocks of groups other than the anchor, and the release of the pages behind a
// sliding group's window.

// lookupGroups finds the prefix-cache hits of tokens in every group: k leading pages such that the
// anchor group (0) has a confirmed chain over all of them (chain, as lookup finds it), every group
// without a window has their twins, and every sliding group has the twins of the pages that the
// window of the first computed token (at position k·BlockSize) covers. hits[g] lists group g's
// blocks of the k pages, NullBlock for a sliding group's pages below that window. The hit length is
// the longest k for which every group has what it needs.
func (p *Pool) lookupGroups(tokens []int32) (k int, hits [][]int32, chain []int32) {
	hits = make([][]int32, len(p.groups))
	chain = p.lookup(tokens)
	if len(chain) == 0 {
		return 0, hits, chain
	}
	limit := len(chain)
	// found[g][i] is group g's twin of chain[i], or NullBlock; run[g][k] the number of consecutive
	// twins found that end at page k−1.
	found := make([][]int32, len(p.groups))
	run := make([][]int, len(p.groups))
	for g := 1; g < len(p.groups); g++ {
		found[g] = make([]int32, len(chain))
		run[g] = make([]int, len(chain)+1)
		for i, a := range chain {
			t, ok := p.twins[twinKey{int32(g), a, p.blocks[a].gen}]
			if !ok {
				t = NullBlock
			}
			found[g][i] = t
			if t != NullBlock {
				run[g][i+1] = run[g][i] + 1
			}
		}
		if p.groups[g].Window == 0 { // the twins must cover every page from the first one
			if i := slices.Index(found[g], NullBlock); i >= 0 {
				limit = min(limit, i)
			}
		}
	}
	for k = limit; k > 0; k-- {
		ok := true
		for g := 1; g < len(p.groups) && ok; g++ {
			if p.groups[g].Window > 0 {
				ok = run[g][k] >= k-p.firstNeeded(g, k*p.blockSize)
			}
		}
		if ok {
			break
		}
	}
	for g := range p.groups {
		lo := p.firstNeeded(g, k*p.blockSize)
		hits[g] = make([]int32, k)
		for i := range k {
			switch {
			case i < lo:
				hits[g][i] = NullBlock
			case g == 0:
				hits[g][i] = chain[i]
			default:
				hits[g][i] = found[g][i]
			}
		}
	}
	return k, hits, chain
}

// registerTwins registers, in every group but the anchor, the committed full blocks of s whose anchor
// page is in its chain, each as the twin of that chain entry (a registered anchor block holding the
// same prefix). When the entry already has a twin in the group, s's block stays private; a page a
// sliding group does not hold, or whose chain entry was evicted since, is passed over.
func (p *Pool) registerTwins(s *sequence) {
	full := min(len(s.chain), s.committed/p.blockSize)
	for g := 1; g < len(p.groups); g++ {
		table := s.tables[g]
		for i := s.twinned[g]; i < full; i++ {
			a, gen := s.chain[i], s.chainGen[i]
			b := table[i]
			if b == NullBlock || !p.blocks[a].hashed || p.blocks[a].gen != gen || p.blocks[b].hashed {
				continue
			}
			key := twinKey{int32(g), a, gen}
			if _, taken := p.twins[key]; taken {
				continue
			}
			blk, anchor := &p.blocks[b], &p.blocks[a]
			p.lastGen++
			blk.hashed, blk.index, blk.gen = true, int32(i), p.lastGen
			blk.twinOf, blk.twinGroup, blk.twinGen = a, int32(g), gen
			blk.nextTwin, anchor.firstTwin = anchor.firstTwin, b
			p.twins[key] = b
		}
		s.twinned[g] = max(s.twinned[g], full)
	}
}

// dropTwins unregisters every twin of anchor block a, which is leaving the prefix cache: a twin nobody
// holds moves from the evictable list to the free list, one still held becomes private.
func (p *Pool) dropTwins(a int32) {
	for t := p.blocks[a].firstTwin; t != noBlock; {
		tb := &p.blocks[t]
		next := tb.nextTwin
		delete(p.twins, twinKey{tb.twinGroup, a, tb.twinGen})
		tb.hashed, tb.index, tb.gen = false, 0, 0
		if tb.ref == 0 {
			p.lruRemove(t)
			p.free = append(p.free, t)
		}
		tb.resetLinks()
		t = next
	}
	p.blocks[a].firstTwin = noBlock
}

// unregisterTwin removes twin t (being evicted) from the prefix cache and from its anchor's list.
func (p *Pool) unregisterTwin(t int32) {
	tb := &p.blocks[t]
	a := tb.twinOf
	if p.blocks[a].firstTwin == t {
		p.blocks[a].firstTwin = tb.nextTwin
	} else {
		c := p.blocks[a].firstTwin
		for p.blocks[c].nextTwin != t {
			c = p.blocks[c].nextTwin
		}
		p.blocks[c].nextTwin = tb.nextTwin
	}
	delete(p.twins, twinKey{tb.twinGroup, a, tb.twinGen})
	tb.hashed, tb.index, tb.gen = false, 0, 0
	tb.resetLinks()
}

// releaseBehind gives back the pages of s's sliding groups that no query from position s.committed on
// attends to (NullBlock in their tables from now on): registered ones stay in the prefix cache.
func (p *Pool) releaseBehind(s *sequence) {
	for g, grp := range p.groups {
		if grp.Window == 0 {
			continue
		}
		table := s.tables[g]
		lo := min(p.firstNeeded(g, s.committed), len(table))
		for i := s.behind[g]; i < lo; i++ {
			if table[i] != NullBlock {
				p.release(table[i])
				table[i] = NullBlock
			}
		}
		s.behind[g] = max(s.behind[g], lo)
	}
}
