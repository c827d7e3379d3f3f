package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSlidingGroupGivesPagesBack follows one sequence of a model with a full-attention group and a
// sliding group (window 20, pages of 8): it holds a block of each group per page when allocated, the
// sliding group's pages go back as the computed count passes their window, and the full group keeps
// every page.
func TestSlidingGroupGivesPagesBack(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 40, BlockSize: 8, Groups: []Group{{}, {Window: 20}}})
	if got := p.MaxTokens(); got != 20*8 {
		t.Errorf("MaxTokens %d, want %d", got, 20*8)
	}
	if got := p.BlocksNeeded(50); got != 2*7 {
		t.Errorf("BlocksNeeded(50) %d, want %d", got, 2*7)
	}
	tokens := seqTokens(50, 1)
	if _, err := p.Allocate(1, tokens); err != nil {
		t.Fatal(err)
	}
	if free := p.Stats().FreeBlocks; free != 40-14 {
		t.Fatalf("%d free blocks after allocating 50 tokens in two groups, want %d", free, 40-14)
	}
	for _, tc := range []struct {
		committed, nulls int // the next query sits at position committed and sees [committed−19, committed]
	}{
		{10, 0}, {26, 0}, {27, 1}, {34, 1}, {35, 2}, {50, 3},
	} {
		if err := p.Commit(1, tc.committed); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, p)
		tables, _ := p.BlockTables(1)
		if slices.Contains(tables[0], NullBlock) {
			t.Fatalf("committed %d: the full group gave back a page: %v", tc.committed, tables[0])
		}
		nulls := 0
		for i, b := range tables[1] {
			if b == NullBlock {
				if i != nulls {
					t.Fatalf("committed %d: a page in the window given back: %v", tc.committed, tables[1])
				}
				nulls++
			}
		}
		if nulls != tc.nulls {
			t.Errorf("committed %d: %d pages given back, want %d (%v)", tc.committed, nulls, tc.nulls, tables[1])
		}
		if free := p.Stats().FreeBlocks; free != 40-14+tc.nulls {
			t.Errorf("committed %d: %d free blocks, want %d", tc.committed, free, 40-14+tc.nulls)
		}
	}
	// Decoding on: each new page takes a block of each group, the sliding one gives one back.
	for n := 50; n < 90; n++ {
		if err := p.Append(1, int32(n+1)); err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(1, n+1); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, p)
	}
	tables, _ := p.BlockTables(1)
	held := 0
	for _, b := range tables[1] {
		if b != NullBlock {
			held++
		}
	}
	if held != 4 { // the next query (position 90) sees 71..90: pages 8 to 11
		t.Errorf("the sliding group holds %d pages at 90 tokens, want the window's 4", held)
	}
	if err := p.Free(1); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	if st := p.Stats(); st.UsedBlocks != 0 || st.FreeBlocks != 40 {
		t.Errorf("after Free: %+v", st)
	}
}

// TestGroupPrefixHits: a prompt computed and freed is found again in every group; a sliding group
// needs (and gets back) only the pages of the window before the hit, and a hit stops short where a
// group lost what it needs.
func TestGroupPrefixHits(t *testing.T) {
	const bs = 4
	prompt := seqTokens(41, 100) // 10 full pages and one token
	for _, tc := range []struct {
		name   string
		groups []Group
		evict  func(p *Pool) // drops some cached blocks before the second allocation
		cached int
	}{
		{"one full group", nil, nil, 40},
		{"full and sliding", []Group{{}, {Window: 6}}, nil, 40},
		{"two full groups", []Group{{}, {}}, nil, 40},
		{"sliding anchor", []Group{{Window: 9}}, nil, 40},
		{"full and sliding, the window's twin evicted", []Group{{}, {Window: 6}}, func(p *Pool) {
			// The twin of page 9 (the last cached page, in the window of position 40) goes: the hit
			// must stop at a page whose window's twins are all there.
			for _, b := range p.twins {
				if p.blocks[b].index == 9 {
					p.lruRemove(b)
					p.unregister(b)
					p.free = append(p.free, b)
				}
			}
		}, 36},
		{"two full groups, a middle twin evicted", []Group{{}, {}}, func(p *Pool) {
			for _, b := range p.twins {
				if p.blocks[b].index == 3 {
					p.lruRemove(b)
					p.unregister(b)
					p.free = append(p.free, b)
				}
			}
		}, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, Config{NumBlocks: 64, BlockSize: bs, PrefixCaching: true, Groups: tc.groups})
			computeAll(t, p, 1, prompt)
			if err := p.Free(1); err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, p)
			if tc.evict != nil {
				tc.evict(p)
				checkInvariants(t, p)
			}
			longer := append(slices.Clone(prompt), 7, 8, 9)
			if cached, ok := p.CanAllocate(longer); !ok || cached != tc.cached {
				t.Fatalf("CanAllocate: %d cached, %v; want %d", cached, ok, tc.cached)
			}
			cached, err := p.Allocate(2, longer)
			if err != nil || cached != tc.cached {
				t.Fatalf("Allocate: %d cached, %v; want %d", cached, err, tc.cached)
			}
			checkInvariants(t, p)
			tables, _ := p.BlockTables(2)
			for g, grp := range p.Groups() {
				lo := 0
				if grp.Window > 0 {
					lo = max(0, cached-grp.Window+1) / bs
				}
				for i, b := range tables[g] {
					if (b == NullBlock) != (i < lo) {
						t.Errorf("group %d page %d: block %d, the window holds pages from %d", g, i, b, lo)
					}
				}
			}
		})
	}
}

// groupHarness drives a pool of several KV groups through random operations and simulates the KV data:
// every computed position writes its token into its slot in each group's table, and every sequence
// must read back its own tokens from every page it holds, in every group, after every operation (a
// prefix hit included). It checks the pool's invariants throughout. A wrong hit, a page shared while
// written, a page handed to two owners or a window page given back shows up as a wrong read.
type groupHarness struct {
	t      testing.TB
	pool   *Pool
	kv     []int32 // the token written into each slot, −1 if none
	live   []SeqID
	next   SeqID
	bases  [][]int32
	numOps int
}

func newGroupHarness(t testing.TB, cfg Config) *groupHarness {
	h := &groupHarness{t: t, pool: mustPool(t, cfg), kv: make([]int32, cfg.NumBlocks*cfg.BlockSize), next: 1}
	for i := range h.kv {
		h.kv[i] = -1
	}
	for b := range 3 {
		base := make([]int32, 5*cfg.BlockSize+b)
		for i := range base {
			base[i] = int32(100*b + i)
		}
		h.bases = append(h.bases, base)
	}
	return h
}

// compute writes the KV of sequence id's positions [from, to) in every group, then commits them.
func (h *groupHarness) compute(id SeqID, to int) {
	s := h.pool.seqs[id]
	bs := h.pool.blockSize
	for pos := s.committed; pos < to; pos++ {
		for g, table := range s.tables {
			b := table[pos/bs]
			if b == NullBlock {
				h.t.Fatalf("op %d: seq %d group %d computes position %d without a page", h.numOps, id, g, pos)
			}
			if p := &h.pool.blocks[b]; p.hashed || p.ref != 1 {
				h.t.Fatalf("op %d: seq %d group %d writes position %d into block %d (ref %d, registered %v)",
					h.numOps, id, g, pos, b, p.ref, p.hashed)
			}
			h.kv[int(b)*bs+pos%bs] = s.tokens[pos]
		}
	}
	if err := h.pool.Commit(id, to); err != nil {
		h.t.Fatal(err)
	}
}

// check verifies the invariants and that every sequence reads its tokens back from its pages.
func (h *groupHarness) check() {
	h.t.Helper()
	if err := h.pool.CheckInvariants(); err != nil {
		h.t.Fatalf("op %d: %v", h.numOps, err)
	}
	bs := h.pool.blockSize
	for _, id := range h.live {
		s := h.pool.seqs[id]
		for g, table := range s.tables {
			for pos := 0; pos < s.committed; pos++ {
				b := table[pos/bs]
				if b == NullBlock {
					continue
				}
				if got := h.kv[int(b)*bs+pos%bs]; got != s.tokens[pos] {
					h.t.Fatalf("op %d: seq %d group %d position %d reads %d from block %d, wrote %d",
						h.numOps, id, g, pos, got, b, s.tokens[pos])
				}
			}
			if w := h.pool.groups[g].Window; w > 0 {
				// Every position the next query attends to is held.
				for pos := max(0, s.committed-w+1); pos < s.committed; pos++ {
					if table[pos/bs] == NullBlock {
						h.t.Fatalf("op %d: seq %d group %d gave back position %d, in the window of %d", h.numOps, id, g, pos, s.committed)
					}
				}
			}
		}
	}
}

func (h *groupHarness) step(rng *rand.Rand) {
	h.numOps++
	p := h.pool
	pick := func() (SeqID, bool) {
		if len(h.live) == 0 {
			return 0, false
		}
		return h.live[rng.IntN(len(h.live))], true
	}
	switch op := rng.IntN(10); {
	case op < 3: // admit a prompt (often sharing a prefix)
		var tokens []int32
		if b := rng.IntN(4); b < 3 {
			tokens = append(tokens, h.bases[b][:rng.IntN(len(h.bases[b])+1)]...)
		}
		for range rng.IntN(4 * p.blockSize) {
			tokens = append(tokens, int32(rng.IntN(3)))
		}
		if len(tokens) == 0 {
			tokens = []int32{9}
		}
		cachedWant, ok := p.CanAllocate(tokens)
		id := h.next
		h.next++
		cached, err := p.Allocate(id, tokens)
		switch {
		case err == nil && (!ok || cached != cachedWant):
			h.t.Fatalf("op %d: Allocate cached %d, CanAllocate said %d, %v", h.numOps, cached, cachedWant, ok)
		case errors.Is(err, ErrNoFreeBlocks) && ok:
			h.t.Fatalf("op %d: Allocate failed after CanAllocate said yes", h.numOps)
		case err != nil && !errors.Is(err, ErrNoFreeBlocks):
			h.t.Fatal(err)
		case err == nil:
			h.live = append(h.live, id)
		}
	case op < 6: // compute a chunk
		if id, ok := pick(); ok {
			s := p.seqs[id]
			if rem := len(s.tokens) - s.committed; rem > 0 {
				h.compute(id, s.committed+1+rng.IntN(rem))
			}
		}
	case op < 8: // decode: append a token once everything is computed, compute it
		if id, ok := pick(); ok {
			s := p.seqs[id]
			if s.committed == len(s.tokens) {
				if err := p.Append(id, int32(rng.IntN(3))); err == nil {
					if rng.IntN(5) == 0 { // a placeholder dropped again
						if err := p.Truncate(id, len(s.tokens)-1); err != nil {
							h.t.Fatal(err)
						}
					} else {
						h.compute(id, len(p.seqs[id].tokens))
					}
				} else if !errors.Is(err, ErrNoFreeBlocks) {
					h.t.Fatal(err)
				}
			}
		}
	default: // finish a sequence
		if id, ok := pick(); ok {
			if err := p.Free(id); err != nil {
				h.t.Fatal(err)
			}
			h.live = slices.DeleteFunc(h.live, func(x SeqID) bool { return x == id })
		}
	}
	h.check()
}

// TestGroupsRandom runs random admissions, chunked prefills, decodes, dropped placeholders and frees
// over pools of several group layouts (Gemma's full + sliding, all sliding, several of each kind,
// windows shorter than a page and of many pages), with and without prefix caching.
func TestGroupsRandom(t *testing.T) {
	layouts := [][]Group{
		{{}, {Window: 5}},
		{{Window: 7}},
		{{}, {Window: 3}, {Window: 3}, {Window: 3}},
		{{}, {}, {Window: 1}},
		{{}, {Window: 17}},
		{{}, {}},
	}
	for i, groups := range layouts {
		for _, prefix := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/prefix=%v", groups, prefix), func(t *testing.T) {
				h := newGroupHarness(t, Config{NumBlocks: 48, BlockSize: 4, PrefixCaching: prefix, Groups: groups})
				rng := rand.New(rand.NewPCG(uint64(i), 77))
				for range 3000 {
					h.step(rng)
				}
				for _, id := range h.live {
					if err := h.pool.Free(id); err != nil {
						t.Fatal(err)
					}
				}
				h.live = nil
				h.check()
				if st := h.pool.Stats(); st.UsedBlocks != 0 {
					t.Errorf("%d blocks held with no sequence", st.UsedBlocks)
				}
				if prefix && h.pool.Stats().HitTokens == 0 {
					t.Error("no prefix hit in the whole run")
				}
			})
		}
	}
}

func TestNewPoolRejectsNegativeWindow(t *testing.T) {
	if _, err := NewPool(Config{NumBlocks: 4, BlockSize: 4, Groups: []Group{{Window: -1}}}); err == nil {
		t.Error("negative window accepted")
	}
}
