package kvcache

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func mustPool(t testing.TB, cfg Config) *Pool {
	t.Helper()
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatalf("NewPool(%+v): %v", cfg, err)
	}
	return p
}

func seqTokens(n int, first int32) []int32 {
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = first + int32(i)
	}
	return tokens
}

// computeAll allocates tokens for id, commits all of them, and returns the cached count.
func computeAll(t *testing.T, p *Pool, id SeqID, tokens []int32) int {
	t.Helper()
	cached, err := p.Allocate(id, tokens)
	if err != nil {
		t.Fatalf("Allocate(%d): %v", id, err)
	}
	if err := p.Commit(id, len(tokens)); err != nil {
		t.Fatalf("Commit(%d): %v", id, err)
	}
	return cached
}

func checkInvariants(t *testing.T, p *Pool) {
	t.Helper()
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestNewPoolValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"ok", Config{NumBlocks: 4, BlockSize: 16}, true},
		{"zero blocks", Config{NumBlocks: 0, BlockSize: 16}, false},
		{"negative block size", Config{NumBlocks: 4, BlockSize: -1}, false},
		{"slot overflow", Config{NumBlocks: 1 << 27, BlockSize: 32}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPool(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewPool(%+v) error %v, want ok=%v", tc.cfg, err, tc.ok)
			}
			if err == nil {
				st := p.Stats()
				if st.TotalBlocks != tc.cfg.NumBlocks || st.FreeBlocks != tc.cfg.NumBlocks || st.UsedBlocks != 0 {
					t.Errorf("fresh pool stats %+v", st)
				}
				checkInvariants(t, p)
			}
		})
	}
}

func TestSlotMapping(t *testing.T) {
	table := []int32{7, 2, 5}
	tests := []struct {
		name       string
		blockSize  int
		start, end int
		want       []int32
	}{
		{"empty", 4, 3, 3, []int32{}},
		{"first block", 4, 0, 4, []int32{28, 29, 30, 31}},
		{"across blocks", 4, 2, 9, []int32{30, 31, 8, 9, 10, 11, 20}},
		{"one decode slot", 4, 11, 12, []int32{23}},
		{"block size 1", 1, 0, 3, []int32{7, 2, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := SlotMapping([]int32{}, table, tc.blockSize, tc.start, tc.end)
			if !slices.Equal(got, tc.want) {
				t.Errorf("SlotMapping(%v, %d, [%d,%d)) = %v, want %v", table, tc.blockSize, tc.start, tc.end, got, tc.want)
			}
			for i, pos := 0, tc.start; pos < tc.end; i, pos = i+1, pos+1 {
				if s := Slot(table, tc.blockSize, pos); s != got[i] {
					t.Errorf("Slot(%d) = %d, SlotMapping has %d", pos, s, got[i])
				}
			}
		})
	}
	t.Run("appends", func(t *testing.T) {
		got := SlotMapping([]int32{-5}, table, 4, 3, 5)
		if want := []int32{-5, 31, 8}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestPrefixHits(t *testing.T) {
	const bs = 4
	base := seqTokens(10, 1) // 2 full blocks + 2 tokens
	tests := []struct {
		name       string
		prefix     bool
		prompt     []int32
		wantCached int
	}{
		{"same prompt reuses full blocks", true, base, 8},
		{"longer prompt", true, append(slices.Clone(base), 50, 51, 52), 8},
		{"shared first block only", true, append(seqTokens(5, 1), 99, 98, 97, 96), 4},
		{"exact block multiple keeps last token uncached", true, seqTokens(8, 1), 4},
		{"prompt of one block", true, seqTokens(4, 1), 0},
		{"different first token", true, append([]int32{0}, base[1:]...), 0},
		{"differs in second block", true, append(seqTokens(4, 1), 0, 6, 7, 8, 9, 10), 4},
		{"prefix caching off", false, base, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, Config{NumBlocks: 16, BlockSize: bs, PrefixCaching: tc.prefix})
			if cached := computeAll(t, p, 1, base); cached != 0 {
				t.Fatalf("first allocation cached %d", cached)
			}
			if err := p.Free(1); err != nil {
				t.Fatal(err)
			}
			if c, ok := p.CanAllocate(tc.prompt); !ok || c != tc.wantCached {
				t.Errorf("CanAllocate = %d, %v; want %d, true", c, ok, tc.wantCached)
			}
			cached, err := p.Allocate(2, tc.prompt)
			if err != nil || cached != tc.wantCached {
				t.Fatalf("Allocate = %d, %v; want %d", cached, err, tc.wantCached)
			}
			st := p.Stats()
			if st.HitTokens != int64(tc.wantCached) || st.QueriedTokens != int64(len(base)+len(tc.prompt)) {
				t.Errorf("hit/queried tokens %d/%d", st.HitTokens, st.QueriedTokens)
			}
			checkInvariants(t, p)

			// Unallocate gives the blocks back and takes the lookup out of the statistics; the
			// same allocation again hits the same blocks and counts once.
			if err := p.Unallocate(2); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.HitTokens != 0 || st.QueriedTokens != int64(len(base)) || st.UsedBlocks != 0 {
				t.Errorf("after Unallocate: %+v, want no hits, %d queried, no block in use", st, len(base))
			}
			checkInvariants(t, p)
			if cached, err := p.Allocate(2, tc.prompt); err != nil || cached != tc.wantCached {
				t.Fatalf("Allocate after Unallocate = %d, %v; want %d", cached, err, tc.wantCached)
			}
			if st := p.Stats(); st.HitTokens != int64(tc.wantCached) || st.QueriedTokens != int64(len(base)+len(tc.prompt)) {
				t.Errorf("after Unallocate and Allocate: hit/queried tokens %d/%d", st.HitTokens, st.QueriedTokens)
			}
			if err := p.Unallocate(99); !errors.Is(err, ErrUnknownSeq) {
				t.Errorf("Unallocate of an unknown sequence: %v", err)
			}
		})
	}
}

func TestSharingBetweenLiveSequences(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 8, BlockSize: 4, PrefixCaching: true})
	prompt := seqTokens(9, 1)
	computeAll(t, p, 1, prompt)
	cached, err := p.Allocate(2, prompt)
	if err != nil || cached != 8 {
		t.Fatalf("Allocate = %d, %v; want 8", cached, err)
	}
	t1, _ := p.BlockTable(1)
	t2, _ := p.BlockTable(2)
	if !slices.Equal(t1[:2], t2[:2]) || t1[2] == t2[2] {
		t.Errorf("tables %v and %v: want the 2 full blocks shared and the last private", t1, t2)
	}
	st := p.Stats()
	if st.UsedBlocks != 4 || st.SharedBlocks != 2 {
		t.Errorf("stats %+v, want 4 used, 2 shared", st)
	}
	// Freeing one sharer keeps the blocks used by the other.
	if err := p.Free(1); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.UsedBlocks != 3 || st.SharedBlocks != 0 || st.CachedBlocks != 0 {
		t.Errorf("after freeing 1: %+v", st)
	}
	if err := p.Free(2); err != nil {
		t.Fatal(err)
	}
	// Only sequence 1 committed anything: its 2 full blocks stay cached, everything else is free.
	if st := p.Stats(); st.UsedBlocks != 0 || st.CachedBlocks != 2 || st.FreeBlocks != 6 {
		t.Errorf("after freeing all: %+v", st)
	}
	checkInvariants(t, p)
}

func TestUncommittedBlocksAreNotShared(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 8, BlockSize: 4, PrefixCaching: true})
	prompt := seqTokens(9, 1)
	if _, err := p.Allocate(1, prompt); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(1, 7); err != nil { // first block computed, second half done
		t.Fatal(err)
	}
	if cached, err := p.Allocate(2, prompt); err != nil || cached != 4 {
		t.Fatalf("Allocate = %d, %v; want 4 (only the computed full block)", cached, err)
	}
	checkInvariants(t, p)
}

func TestLRUEviction(t *testing.T) {
	// 6 blocks of 2. Sequences A and B each compute 2 full blocks + 1 token and are freed: A first.
	p := mustPool(t, Config{NumBlocks: 6, BlockSize: 2, PrefixCaching: true})
	a, b := seqTokens(5, 10), seqTokens(5, 20)
	computeAll(t, p, 1, a)
	computeAll(t, p, 2, b)
	if err := p.Free(1); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(2); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.CachedBlocks != 4 || st.FreeBlocks != 2 {
		t.Fatalf("stats %+v, want 4 cached, 2 free", st)
	}
	// A new unrelated 3-block sequence takes the 2 free blocks, then evicts the least recently
	// freed cached block: A's second block (tails are released first).
	if _, err := p.Allocate(3, seqTokens(5, 90)); err != nil {
		t.Fatal(err)
	}
	if c, _ := p.CanAllocate(a); c != 2 {
		t.Errorf("A's cached prefix: %d tokens, want 2 (its tail block evicted first)", c)
	}
	if c, _ := p.CanAllocate(b); c != 4 {
		t.Errorf("B's cached prefix: %d tokens, want 4", c)
	}
	// A hit refreshes: allocate B again (its blocks leave the LRU), free it: B is now most recent.
	if _, err := p.Allocate(4, b); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(4); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(3); err != nil {
		t.Fatal(err)
	}
	// Cached now: A0 (oldest), B1, B0 (refreshed). Free: 3's blocks. Take 5 blocks: 3 free, then A0, B1.
	if _, err := p.Allocate(5, seqTokens(10, 200)); err != nil {
		t.Fatal(err)
	}
	if c, _ := p.CanAllocate(a); c != 0 {
		t.Errorf("A's cached prefix %d, want 0", c)
	}
	if c, _ := p.CanAllocate(b); c != 2 {
		t.Errorf("B's cached prefix %d, want 2", c)
	}
	checkInvariants(t, p)
}

func TestHashCollisionIsAMiss(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 8, BlockSize: 2, PrefixCaching: true, HashSeed: 7})
	a := []int32{1, 2, 3}
	computeAll(t, p, 1, a)
	if err := p.Free(1); err != nil {
		t.Fatal(err)
	}
	// Forge a collision: make the hash of prompt b's first block point at a's block.
	b := []int32{5, 6, 7}
	hb := blockHash(p.rootHash(), b[:2])
	ha := blockHash(p.rootHash(), a[:2])
	blk := p.byHash[ha]
	delete(p.byHash, ha)
	p.byHash[hb] = blk
	p.blocks[blk].hash = hb
	if cached, err := p.Allocate(2, b); err != nil || cached != 0 {
		t.Fatalf("Allocate over a colliding hash = %d, %v; want a miss", cached, err)
	}
	// Computing b must not steal the taken hash: its block stays private.
	if err := p.Commit(2, 3); err != nil {
		t.Fatal(err)
	}
	table, _ := p.BlockTable(2)
	if p.blocks[table[0]].hashed {
		t.Errorf("block registered under a hash another block holds")
	}
	if p.byHash[hb] != blk {
		t.Errorf("hash index entry replaced")
	}
}

func TestHashSeedChangesHashes(t *testing.T) {
	p1 := mustPool(t, Config{NumBlocks: 1, BlockSize: 1, HashSeed: 1})
	p2 := mustPool(t, Config{NumBlocks: 1, BlockSize: 1, HashSeed: 2})
	if p1.rootHash() == p2.rootHash() {
		t.Error("root hash does not depend on the seed")
	}
	if blockHash(1, []int32{1, 2}) == blockHash(1, []int32{2, 1}) || blockHash(1, []int32{1}) == blockHash(2, []int32{1}) {
		t.Error("block hash ignores token order or parent")
	}
}

func TestErrorsLeavePoolUnchanged(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 4, BlockSize: 2, PrefixCaching: true})
	computeAll(t, p, 1, seqTokens(5, 1)) // 3 blocks
	before := p.Stats()
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"allocate too many", func() error { _, err := p.Allocate(2, seqTokens(3, 50)); return err }, ErrNoFreeBlocks},
		{"allocate duplicate", func() error { _, err := p.Allocate(1, []int32{1}); return err }, ErrDuplicateSeq},
		{"allocate empty", func() error { _, err := p.Allocate(3, nil); return err }, nil},
		{"append too many", func() error { return p.Append(1, 1, 2, 3, 4) }, ErrNoFreeBlocks},
		{"append unknown", func() error { return p.Append(9, 1) }, ErrUnknownSeq},
		{"commit unknown", func() error { return p.Commit(9, 1) }, ErrUnknownSeq},
		{"commit beyond tokens", func() error { return p.Commit(1, 6) }, nil},
		{"free unknown", func() error { return p.Free(9) }, ErrUnknownSeq},
		{"block table unknown", func() error { _, err := p.BlockTable(9); return err }, ErrUnknownSeq},
		{"num tokens unknown", func() error { _, err := p.NumTokens(9); return err }, ErrUnknownSeq},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("no error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "kvcache: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			if after := p.Stats(); after != before {
				t.Errorf("stats changed: %+v -> %+v", before, after)
			}
			checkInvariants(t, p)
		})
	}
	if p.CanAppend(1, 4) || !p.CanAppend(1, 3) || p.CanAppend(9, 1) {
		t.Error("CanAppend disagrees with Append")
	}
}

func TestAppendGrowsTable(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 4, BlockSize: 4})
	if _, err := p.Allocate(1, seqTokens(3, 1)); err != nil {
		t.Fatal(err)
	}
	view, _ := p.BlockTable(1)
	for i, want := range []int{1, 2, 2, 2, 2, 3} { // blocks after appending token 4, 5, ...
		if err := p.Append(1, int32(10+i)); err != nil {
			t.Fatal(err)
		}
		table, _ := p.BlockTable(1)
		if len(table) != want {
			t.Errorf("after %d tokens: %d blocks, want %d", 4+i, len(table), want)
		}
	}
	if n, _ := p.NumTokens(1); n != 9 {
		t.Errorf("NumTokens = %d, want 9", n)
	}
	if len(view) != 1 {
		t.Errorf("an earlier view changed length to %d", len(view))
	}
	checkInvariants(t, p)
}

func TestCheckInvariantsDetectsCorruption(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(p *Pool)
		want    string
	}{
		{"ref count", func(p *Pool) { p.blocks[p.seqs[1].tables[0][0]].ref++ }, "ref"},
		{"block in two lists", func(p *Pool) { p.free = append(p.free, p.seqs[1].tables[0][0]) }, "free"},
		{"hash index", func(p *Pool) { p.byHash[12345] = 0 }, "hash index"},
		{"table length", func(p *Pool) { p.seqs[1].tokens = append(p.seqs[1].tokens, 1, 2, 3, 4, 5) }, "blocks"},
		{"counter", func(p *Pool) { p.numUsed++ }, "counters"},
		{"stored tokens", func(p *Pool) { p.blockTokens[int(p.seqs[1].tables[0][0])*p.blockSize]++ }, "hash"},
		{"lost free block", func(p *Pool) { p.free = p.free[:len(p.free)-1] }, "free"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, Config{NumBlocks: 8, BlockSize: 2, PrefixCaching: true})
			computeAll(t, p, 1, seqTokens(5, 1))
			checkInvariants(t, p)
			tc.corrupt(p)
			err := p.CheckInvariants()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckInvariants() = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestStatsHitRate(t *testing.T) {
	if r := (Stats{}).HitRate(); r != 0 {
		t.Errorf("empty hit rate %v", r)
	}
	if r := (Stats{QueriedTokens: 8, HitTokens: 2}).HitRate(); r != 0.25 {
		t.Errorf("hit rate %v, want 0.25", r)
	}
}

func BenchmarkAllocateFreeWithPrefixHits(b *testing.B) {
	p := mustPool(b, Config{NumBlocks: 4096, BlockSize: 16, PrefixCaching: true})
	prompt := seqTokens(1000, 1)
	if _, err := p.Allocate(0, prompt); err != nil {
		b.Fatal(err)
	}
	if err := p.Commit(0, len(prompt)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := SeqID(i + 1)
		if _, err := p.Allocate(id, prompt); err != nil {
			b.Fatal(err)
		}
		if err := p.Free(id); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSlotMapping(b *testing.B) {
	table := seqTokens(512, 3)
	dst := make([]int32, 0, 8192)
	for b.Loop() {
		dst = SlotMapping(dst[:0], table, 16, 0, 8192)
	}
}

// TestChainedHashCollisionIsAMiss forges the state a collision of two different prefixes' chained
// hashes leaves behind (as an attacker who can craft FNV collisions could produce): prefix A's first
// block hashes like W's, so A's second block is registered under the parent hash that W's first
// block has. A victim whose prompt starts with W's first block and continues with A's second block
// must not be handed A's second block: its KV was computed after A's first block, not W's.
func TestChainedHashCollisionIsAMiss(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 16, BlockSize: 2, PrefixCaching: true})
	w := []int32{5, 6, 7}
	a := []int32{1, 2, 9, 9, 3}
	computeAll(t, p, 1, w)
	computeAll(t, p, 2, a)
	hw0 := blockHash(p.rootHash(), w[:2])
	ha0 := blockHash(p.rootHash(), a[:2])
	ha1 := blockHash(ha0, a[2:4])
	a0, a1 := p.byHash[ha0], p.byHash[ha1]
	// Had A's first block hashed to hw0, it would have stayed private (W holds the hash) and its
	// second block would have been registered under the parent hash hw0.
	delete(p.byHash, ha0)
	p.blocks[a0].hashed = false
	forged := blockHash(hw0, a[2:4])
	delete(p.byHash, ha1)
	p.byHash[forged] = a1
	p.blocks[a1].hash, p.blocks[a1].parent = forged, hw0

	victim := []int32{5, 6, 9, 9, 4}
	if cached, ok := p.CanAllocate(victim); !ok || cached != 2 {
		t.Fatalf("CanAllocate(victim) = %d, %v; want 2 (only W's block), true", cached, ok)
	}
	if cached, err := p.Allocate(3, victim); err != nil || cached != 2 {
		t.Fatalf("Allocate(victim) = %d, %v; want 2: a block computed after another prefix was shared", cached, err)
	}
}

// BenchmarkStats measures Pool.Stats, which the engine calls after every step: its cost must not
// grow with the pool (a GPU pool holds tens of thousands of blocks).
func BenchmarkStats(b *testing.B) {
	for _, numBlocks := range []int{1 << 10, 1 << 17} {
		b.Run(fmt.Sprint("blocks=", numBlocks), func(b *testing.B) {
			p := mustPool(b, Config{NumBlocks: numBlocks, BlockSize: 16, PrefixCaching: true})
			prompt := seqTokens(16*8+1, 1)
			for id := range SeqID(4) {
				if _, err := p.Allocate(id, prompt); err != nil {
					b.Fatal(err)
				}
				if err := p.Commit(id, len(prompt)); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if st := p.Stats(); st.SharedBlocks != 8 {
					b.Fatalf("stats %+v", st)
				}
			}
		})
	}
}

// BenchmarkAllocateBlockedHead measures a failing Allocate of a 32768-token prompt whose first 2000
// blocks are cached: what the scheduler pays every step while the head of its queue waits for blocks.
func BenchmarkAllocateBlockedHead(b *testing.B) {
	p := mustPool(b, Config{NumBlocks: 2010, BlockSize: 16, PrefixCaching: true})
	prompt := seqTokens(32768, 1)
	if _, err := p.Allocate(1, prompt[:16*2000]); err != nil {
		b.Fatal(err)
	}
	if err := p.Commit(1, 16*2000); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Allocate(2, prompt); !errors.Is(err, ErrNoFreeBlocks) {
			b.Fatalf("Allocate: %v, want ErrNoFreeBlocks", err)
		}
	}
}

// TestAllocateUncached: a sequence that skips the lookup gets new blocks even where the cache holds
// its prefix, the statistics do not count it, and its committed blocks still serve later lookups.
func TestAllocateUncached(t *testing.T) {
	const bs = 4
	base := seqTokens(10, 1)
	p := mustPool(t, Config{NumBlocks: 16, BlockSize: bs, PrefixCaching: true})
	computeAll(t, p, 1, base)
	if err := p.Free(1); err != nil {
		t.Fatal(err)
	}
	cachedBlocks := p.Stats().CachedBlocks
	if err := p.AllocateUncached(2, base); err != nil {
		t.Fatal(err)
	}
	table, err := p.BlockTable(2)
	if err != nil {
		t.Fatal(err)
	}
	want := p.Stats()
	if want.QueriedTokens != int64(len(base)) || want.HitTokens != 0 {
		t.Errorf("uncached allocation counted in the lookups: queried %d, hits %d", want.QueriedTokens, want.HitTokens)
	}
	if want.UsedBlocks != len(table) || want.CachedBlocks != cachedBlocks {
		t.Errorf("used %d, cached %d blocks; want %d new blocks and the %d cached untouched", want.UsedBlocks, want.CachedBlocks, len(table), cachedBlocks)
	}
	if err := p.Commit(2, len(base)); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	// A later lookup of the same prompt hits two full blocks (the first sequence's or the second's).
	if cached, err := p.Allocate(3, base); err != nil || cached != 8 {
		t.Errorf("Allocate after the uncached sequence = %d, %v; want 8", cached, err)
	}
	if err := p.AllocateUncached(2, base); !errors.Is(err, ErrDuplicateSeq) {
		t.Errorf("AllocateUncached of a live id: %v", err)
	}
	checkInvariants(t, p)
	// Too big for the pool: refused, pool unchanged.
	before := p.Stats()
	if err := p.AllocateUncached(4, seqTokens(16*bs, 100)); !errors.Is(err, ErrNoFreeBlocks) {
		t.Errorf("AllocateUncached past the pool: %v", err)
	}
	if p.Stats() != before {
		t.Errorf("failed AllocateUncached changed the pool: %+v → %+v", before, p.Stats())
	}
}
