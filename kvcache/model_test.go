package kvcache

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// This file checks Pool against refModel, a deliberately naive model of the same policy: cache
// entries are keyed by the full token prefix they end (no hashing), block identities are not
// tracked, and LRU eviction is a linear scan for the smallest release tick. A driver applies random
// operations to both and compares every result and statistic, checks the pool's invariants, and
// simulates the KV data itself: every committed token position "writes" its token id into its slot,
// and every live sequence must read back exactly its own tokens from its block table. That catches
// wrong prefix hits, shared blocks being written, and blocks handed to two owners.

type refEntry struct {
	ref    int
	tick   int // when ref last dropped to 0 (LRU order)
	serial int // registration number: an entry evicted and registered again is another entry
}

type refSeq struct {
	tokens    []int32
	committed int
	processed int      // leading full blocks already considered for registration (hits included)
	keys      []string // per block: the cache key if registered, "" if private
	chain     []int    // serials of the entries holding the first len(chain) full blocks
	broken    bool     // the chain stopped growing: an entry of it was evicted
}

type refModel struct {
	blockSize, total int
	prefix           bool
	free             int
	entries          map[string]*refEntry
	seqs             map[SeqID]*refSeq
	tick             int
	serial           int
	queried, hit     int64
}

func newRefModel(cfg Config) *refModel {
	return &refModel{
		blockSize: cfg.BlockSize, total: cfg.NumBlocks, prefix: cfg.PrefixCaching,
		free: cfg.NumBlocks, entries: map[string]*refEntry{}, seqs: map[SeqID]*refSeq{},
	}
}

// prefixKey names the block that ends the first n tokens.
func prefixKey(tokens []int32, n int) string {
	b := make([]byte, 0, 4*n)
	for _, t := range tokens[:n] {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return string(b)
}

func (m *refModel) lookup(tokens []int32) []string {
	if !m.prefix {
		return nil
	}
	var hits []string
	for i := 0; i < (len(tokens)-1)/m.blockSize; i++ {
		k := prefixKey(tokens, (i+1)*m.blockSize)
		if _, ok := m.entries[k]; !ok {
			break
		}
		hits = append(hits, k)
	}
	return hits
}

func (m *refModel) evictable() int {
	n := 0
	for _, e := range m.entries {
		if e.ref == 0 {
			n++
		}
	}
	return n
}

func (m *refModel) available(hits []string) int {
	n := m.free + m.evictable()
	for _, k := range hits {
		if m.entries[k].ref == 0 {
			n--
		}
	}
	return n
}

// take gives a new private block: free first, else evict the least recently released entry. An
// entry exists only while the entry of its parent prefix does: evicting one drops every entry that
// extends it; those nobody holds become free blocks, the others private ones.
func (m *refModel) take() {
	if m.free > 0 {
		m.free--
		return
	}
	victim, best := "", -1
	for k, e := range m.entries {
		if e.ref == 0 && (best < 0 || e.tick < best) {
			victim, best = k, e.tick
		}
	}
	if best < 0 {
		panic("refModel: take from exhausted pool")
	}
	for k, e := range m.entries {
		if len(k) <= len(victim) || !strings.HasPrefix(k, victim) {
			continue
		}
		delete(m.entries, k)
		if e.ref == 0 {
			m.free++
			continue
		}
		for _, s := range m.seqs {
			for i := range s.keys {
				if s.keys[i] == k {
					s.keys[i] = ""
				}
			}
		}
	}
	delete(m.entries, victim)
}

func (m *refModel) canAllocate(tokens []int32) (int, bool) {
	hits := m.lookup(tokens)
	return len(hits) * m.blockSize, BlocksFor(len(tokens), m.blockSize)-len(hits) <= m.available(hits)
}

func (m *refModel) allocate(id SeqID, tokens []int32) (int, error) {
	if _, ok := m.seqs[id]; ok {
		return 0, ErrDuplicateSeq
	}
	hits := m.lookup(tokens)
	n := BlocksFor(len(tokens), m.blockSize)
	if n-len(hits) > m.available(hits) {
		return 0, ErrNoFreeBlocks
	}
	s := &refSeq{tokens: slices.Clone(tokens), committed: len(hits) * m.blockSize, processed: len(hits)}
	for _, k := range hits {
		m.entries[k].ref++
		s.keys = append(s.keys, k)
		s.chain = append(s.chain, m.entries[k].serial)
	}
	for len(s.keys) < n {
		m.take()
		s.keys = append(s.keys, "")
	}
	m.seqs[id] = s
	m.queried += int64(len(tokens))
	m.hit += int64(s.committed)
	return s.committed, nil
}

func (m *refModel) appendTokens(id SeqID, tokens []int32) error {
	s, ok := m.seqs[id]
	if !ok {
		return ErrUnknownSeq
	}
	n := BlocksFor(len(s.tokens)+len(tokens), m.blockSize)
	if n-len(s.keys) > m.free+m.evictable() {
		return ErrNoFreeBlocks
	}
	for len(s.keys) < n {
		m.take()
		s.keys = append(s.keys, "")
	}
	s.tokens = append(s.tokens, tokens...)
	return nil
}

// setToken replaces an uncommitted token.
func (m *refModel) setToken(id SeqID, pos int, tok int32) error {
	s, ok := m.seqs[id]
	if !ok {
		return ErrUnknownSeq
	}
	if pos < s.committed || pos >= len(s.tokens) {
		return errOutOfRange
	}
	s.tokens[pos] = tok
	return nil
}

// truncate drops trailing uncommitted tokens; the blocks it empties are private, so they go back
// to the free count.
func (m *refModel) truncate(id SeqID, n int) error {
	s, ok := m.seqs[id]
	if !ok {
		return ErrUnknownSeq
	}
	if n < s.committed || n > len(s.tokens) {
		return errOutOfRange
	}
	s.tokens = s.tokens[:n]
	for keep := BlocksFor(n, m.blockSize); len(s.keys) > keep; s.keys = s.keys[:len(s.keys)-1] {
		if s.keys[len(s.keys)-1] != "" {
			panic("model: truncating a registered block")
		}
		m.free++
	}
	return nil
}

func (m *refModel) commit(id SeqID, n int) {
	s := m.seqs[id]
	if n <= s.committed {
		return
	}
	s.committed = n
	if !m.prefix {
		return
	}
	for ; s.processed < n/m.blockSize; s.processed++ {
		i := s.processed
		if s.broken {
			continue
		}
		if i > 0 {
			if e, ok := m.entries[prefixKey(s.tokens, i*m.blockSize)]; !ok || e.serial != s.chain[i-1] {
				s.broken = true
				continue
			}
		}
		k := prefixKey(s.tokens, (i+1)*m.blockSize)
		if e, taken := m.entries[k]; taken {
			s.chain = append(s.chain, e.serial)
			continue
		}
		m.serial++
		m.entries[k] = &refEntry{ref: 1, serial: m.serial}
		s.keys[i] = k
		s.chain = append(s.chain, m.serial)
	}
}

func (m *refModel) freeSeq(id SeqID) error {
	s, ok := m.seqs[id]
	if !ok {
		return ErrUnknownSeq
	}
	for i := len(s.keys) - 1; i >= 0; i-- {
		if k := s.keys[i]; k != "" {
			e := m.entries[k]
			e.ref--
			if e.ref == 0 {
				m.tick++
				e.tick = m.tick
			}
		} else {
			m.free++
		}
	}
	delete(m.seqs, id)
	return nil
}

func (m *refModel) stats() Stats {
	st := Stats{TotalBlocks: m.total, FreeBlocks: m.free, QueriedTokens: m.queried, HitTokens: m.hit}
	for _, e := range m.entries {
		switch {
		case e.ref == 0:
			st.CachedBlocks++
		case e.ref > 1:
			st.SharedBlocks++
		}
	}
	st.UsedBlocks = m.total - st.FreeBlocks - st.CachedBlocks
	return st
}

// chooser is a source of choices: random (property test) or bytes (fuzzing).
type chooser interface {
	// intn returns a choice in [0, n); ok is false when the source is exhausted.
	intn(n int) (v int, ok bool)
}

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) (int, bool) { return c.r.IntN(n), true }

type byteChooser struct{ data []byte }

func (c *byteChooser) intn(n int) (int, bool) {
	if len(c.data) == 0 {
		return 0, false
	}
	v := int(c.data[0]) % n
	c.data = c.data[1:]
	return v, true
}

// harness drives a Pool and a refModel with the same operations.
type harness struct {
	t       testing.TB
	pool    *Pool
	model   *refModel
	kv      []int32 // simulated KV contents: the token id written into each slot, -1 if none
	nextID  SeqID
	live    []SeqID
	bases   [][]int32 // shared prompt prefixes
	numOps  int
	lastErr string
}

func newHarness(t testing.TB, cfg Config) *harness {
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatalf("NewPool(%+v): %v", cfg, err)
	}
	h := &harness{t: t, pool: p, model: newRefModel(cfg), kv: make([]int32, cfg.NumBlocks*cfg.BlockSize)}
	for i := range h.kv {
		h.kv[i] = -1
	}
	for b := range 3 {
		base := make([]int32, 3*cfg.BlockSize+b)
		for i := range base {
			base[i] = int32(100*b + i)
		}
		h.bases = append(h.bases, base)
	}
	return h
}

func (h *harness) randomTokens(c chooser) ([]int32, bool) {
	n, ok := c.intn(5 * h.pool.BlockSize())
	if !ok {
		return nil, false
	}
	var tokens []int32
	if b, _ := c.intn(len(h.bases) + 1); b < len(h.bases) {
		k, _ := c.intn(len(h.bases[b]) + 1)
		tokens = append(tokens, h.bases[b][:k]...)
	}
	for range n {
		v, _ := c.intn(4) // a tiny vocabulary makes equal blocks (and duplicates) common
		tokens = append(tokens, int32(v))
	}
	if len(tokens) == 0 {
		tokens = append(tokens, 7)
	}
	return tokens, true
}

// errOutOfRange stands for the errors (without a sentinel) of SetToken and Truncate given a
// position or count out of range.
var errOutOfRange = errors.New("out of range")

func errKind(err error) error {
	for _, e := range []error{ErrNoFreeBlocks, ErrUnknownSeq, ErrDuplicateSeq} {
		if errors.Is(err, e) {
			return e
		}
	}
	if err != nil && strings.Contains(err.Error(), "outside") {
		return errOutOfRange
	}
	return err
}

// step applies one random operation; it returns false when the chooser is exhausted.
func (h *harness) step(c chooser) bool {
	t := h.t
	t.Helper()
	op, ok := c.intn(12)
	if !ok {
		return false
	}
	h.numOps++
	pickLive := func() (SeqID, bool) {
		if len(h.live) == 0 {
			return 0, false
		}
		i, _ := c.intn(len(h.live))
		return h.live[i], true
	}
	switch op {
	case 0, 1, 2: // allocate a new sequence
		tokens, ok := h.randomTokens(c)
		if !ok {
			return false
		}
		wantCached, wantOK := h.model.canAllocate(tokens)
		gotCached, gotOK := h.pool.CanAllocate(tokens)
		if gotOK != wantOK || (gotOK && gotCached != wantCached) {
			t.Fatalf("op %d: CanAllocate(%d tokens) = %d, %v; model %d, %v", h.numOps, len(tokens), gotCached, gotOK, wantCached, wantOK)
		}
		id := h.nextID
		h.nextID++
		want, wantErr := h.model.allocate(id, tokens)
		got, err := h.pool.Allocate(id, tokens)
		if errKind(err) != wantErr || got != want {
			t.Fatalf("op %d: Allocate(%d, %d tokens) = %d, %v; model %d, %v", h.numOps, id, len(tokens), got, err, want, wantErr)
		}
		if err == nil {
			h.live = append(h.live, id)
			if gotOK != true {
				t.Fatalf("op %d: Allocate succeeded after CanAllocate said no", h.numOps)
			}
		}
	case 3: // allocate an id that is live
		if id, ok := pickLive(); ok {
			if _, err := h.pool.Allocate(id, []int32{1}); !errors.Is(err, ErrDuplicateSeq) {
				t.Fatalf("op %d: Allocate of live id %d: %v, want ErrDuplicateSeq", h.numOps, id, err)
			}
		}
	case 4, 5: // append tokens
		if id, ok := pickLive(); ok {
			n, _ := c.intn(3)
			tokens := make([]int32, n+1)
			for i := range tokens {
				v, _ := c.intn(4)
				tokens[i] = int32(v)
			}
			wantCan := h.model.seqs[id] != nil && BlocksFor(len(h.model.seqs[id].tokens)+len(tokens), h.model.blockSize)-len(h.model.seqs[id].keys) <= h.model.free+h.model.evictable()
			if got := h.pool.CanAppend(id, len(tokens)); got != wantCan {
				t.Fatalf("op %d: CanAppend(%d, %d) = %v, model %v", h.numOps, id, len(tokens), got, wantCan)
			}
			wantErr := h.model.appendTokens(id, tokens)
			if err := h.pool.Append(id, tokens...); errKind(err) != wantErr {
				t.Fatalf("op %d: Append(%d, %d tokens) = %v, model %v", h.numOps, id, len(tokens), err, wantErr)
			}
		}
	case 6, 7: // compute (write KV) and commit a prefix
		if id, ok := pickLive(); ok {
			ms := h.model.seqs[id]
			k, _ := c.intn(len(ms.tokens) - ms.committed + 1)
			n := ms.committed + k
			h.writeKV(id, ms.committed, n)
			h.model.commit(id, n)
			if err := h.pool.Commit(id, n); err != nil {
				t.Fatalf("op %d: Commit(%d, %d): %v", h.numOps, id, n, err)
			}
		}
	case 8: // free
		if len(h.live) > 0 {
			i, _ := c.intn(len(h.live))
			id := h.live[i]
			h.live = slices.Delete(h.live, i, i+1)
			h.free(id)
		}
	case 9: // free an unknown id
		if err := h.pool.Free(h.nextID + 1000); !errors.Is(err, ErrUnknownSeq) {
			t.Fatalf("op %d: Free(unknown) = %v, want ErrUnknownSeq", h.numOps, err)
		}
	case 10: // replace a token, usually an uncommitted one (a placeholder getting its sampled id)
		if id, ok := pickLive(); ok {
			ms := h.model.seqs[id]
			pos, _ := c.intn(len(ms.tokens) + 1)
			v, _ := c.intn(4)
			wantErr := h.model.setToken(id, pos, int32(v))
			if err := h.pool.SetToken(id, pos, int32(v)); errKind(err) != wantErr {
				t.Fatalf("op %d: SetToken(%d, %d) = %v, model %v", h.numOps, id, pos, err, wantErr)
			}
		}
	case 11: // truncate, usually to at least the committed count (a discarded placeholder)
		if id, ok := pickLive(); ok {
			ms := h.model.seqs[id]
			n, _ := c.intn(len(ms.tokens) + 2)
			wantErr := h.model.truncate(id, n)
			if err := h.pool.Truncate(id, n); errKind(err) != wantErr {
				t.Fatalf("op %d: Truncate(%d, %d) = %v, model %v", h.numOps, id, n, err, wantErr)
			}
		}
	}
	h.check()
	return true
}

func (h *harness) free(id SeqID) {
	h.t.Helper()
	wantErr := h.model.freeSeq(id)
	if err := h.pool.Free(id); errKind(err) != wantErr {
		h.t.Fatalf("op %d: Free(%d) = %v, model %v", h.numOps, id, err, wantErr)
	}
}

// writeKV plays the model: it writes the KV of positions [from, to) of sequence id, which must go
// to blocks that nobody else can read.
func (h *harness) writeKV(id SeqID, from, to int) {
	h.t.Helper()
	s := h.pool.seqs[id]
	for pos := from; pos < to; pos++ {
		b := s.tables[0][pos/h.pool.blockSize]
		if blk := h.pool.blocks[b]; blk.ref != 1 || blk.hashed {
			h.t.Fatalf("op %d: sequence %d writes position %d into block %d with ref %d, registered %v",
				h.numOps, id, pos, b, blk.ref, blk.hashed)
		}
		h.kv[Slot(s.tables[0], h.pool.blockSize, pos)] = s.tokens[pos]
	}
}

// check compares statistics, checks invariants, and reads back every live sequence's KV.
func (h *harness) check() {
	h.t.Helper()
	if got, want := h.pool.Stats(), h.model.stats(); got != want {
		h.t.Fatalf("op %d: Stats() = %+v\nmodel      %+v", h.numOps, got, want)
	}
	if err := h.pool.CheckInvariants(); err != nil {
		h.t.Fatalf("op %d: %v", h.numOps, err)
	}
	for _, id := range h.live {
		s, ms := h.pool.seqs[id], h.model.seqs[id]
		if !slices.Equal(s.tokens, ms.tokens) || s.committed != ms.committed {
			h.t.Fatalf("op %d: sequence %d: pool has %d tokens, %d committed; model %d, %d",
				h.numOps, id, len(s.tokens), s.committed, len(ms.tokens), ms.committed)
		}
		slots := SlotMapping(nil, s.tables[0], h.pool.blockSize, 0, s.committed)
		for pos, slot := range slots {
			if h.kv[slot] != s.tokens[pos] {
				h.t.Fatalf("op %d: sequence %d position %d reads token %d from slot %d, want %d",
					h.numOps, id, pos, h.kv[slot], slot, s.tokens[pos])
			}
		}
	}
}

// finish frees every live sequence and checks that nothing is held.
func (h *harness) finish() {
	h.t.Helper()
	for _, id := range h.live {
		h.free(id)
	}
	h.live = nil
	h.check()
	st := h.pool.Stats()
	if st.UsedBlocks != 0 || st.FreeBlocks+st.CachedBlocks != st.TotalBlocks || h.pool.NumSeqs() != 0 {
		h.t.Fatalf("after freeing everything: %+v, %d sequences", st, h.pool.NumSeqs())
	}
	for b := range h.pool.blocks {
		if h.pool.blocks[b].ref != 0 {
			h.t.Fatalf("block %d still has ref %d", b, h.pool.blocks[b].ref)
		}
	}
}

func TestPoolAgainstModel(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		cfg := Config{
			NumBlocks:     3 + r.IntN(40),
			BlockSize:     []int{1, 2, 3, 4, 8, 16}[r.IntN(6)],
			PrefixCaching: seed%4 != 3,
			HashSeed:      r.Uint64(),
		}
		t.Run("", func(t *testing.T) {
			h := newHarness(t, cfg)
			c := randChooser{r}
			for range 1500 {
				h.step(c)
			}
			h.finish()
			st := h.pool.Stats()
			t.Logf("%+v: %d ops, hit rate %.2f, %d evictable left", cfg, h.numOps, st.HitRate(), st.CachedBlocks)
			if cfg.PrefixCaching && st.HitTokens == 0 {
				t.Errorf("no prefix hit in %d operations: the test does not exercise sharing", h.numOps)
			}
		})
	}
}

func FuzzPool(f *testing.F) {
	f.Add(uint8(8), uint8(4), true, []byte{0, 20, 1, 6, 0, 0, 0, 20, 1, 8, 0, 0, 0, 20, 1})
	f.Add(uint8(2), uint8(1), true, []byte{0, 3, 0, 0, 0, 0, 4, 0, 1, 6, 0, 3, 8, 0, 0, 3, 0})
	f.Add(uint8(16), uint8(2), false, []byte("the quick brown fox jumps over the lazy dog"))
	f.Fuzz(func(t *testing.T, numBlocks, blockSize uint8, prefix bool, ops []byte) {
		cfg := Config{NumBlocks: 1 + int(numBlocks%48), BlockSize: 1 + int(blockSize%16), PrefixCaching: prefix, HashSeed: 42}
		h := newHarness(t, cfg)
		c := &byteChooser{ops}
		for h.step(c) {
		}
		h.finish()
	})
}
