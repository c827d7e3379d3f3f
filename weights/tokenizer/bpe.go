package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// mergeKey packs an adjacent pair of symbol ids into one map key.
func mergeKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// merge is what an adjacent pair becomes: the id of the merged token and the rank (priority) of the
// merge; lower ranks merge first.
type merge struct {
	rank  int32
	newID int32
}

// bpeModel is the BPE model of tokenizer.json ("model": {"type": "BPE"}), HuggingFace semantics.
//
// It is our own rather than gotokenizers' bpemodel.BPEModel: that one lacks byte fallback and
// ignore_merges, its cache is a stub, and its merge loop is quadratic in the word length (see doc.go).
type bpeModel struct {
	vocab   map[string]int32 // token → id, the model's own vocabulary (not the added tokens)
	merges  map[uint64]merge // (left id, right id) → merged id and rank
	runeIDs map[rune]int32   // single-rune tokens, for the initial split of a word into characters

	unkID        int32 // -1 when the model has no unknown token
	fuseUnk      bool
	byteFallback bool
	byteTokenIDs [256]int32 // id of "<0xNN>" for each byte, -1 when absent
	ignoreMerges bool

	continuingSubwordPrefix string
	endOfWordSuffix         string

	// Byte-level input: when the tokenizer's last pre-tokenizer is ByteLevel we skip building the
	// mapped string (each byte → one printable rune) and feed raw bytes here instead.
	byteLevelIDs [256]int32       // id of the token for the rune that byte b maps to; -1 when absent
	rawVocab     map[string]int32 // vocab keyed by the raw bytes a byte-level token stands for

	cache *wordCache
}

// maxCachedWordLen matches HuggingFace: longer words are not cached.
const maxCachedWordLen = 256

// tokenizeWord appends the ids of one pre-tokenized word (model input) to out.
func (m *bpeModel) tokenizeWord(word string, out []int32) []int32 {
	if word == "" {
		return out
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(out, id)
		}
	}
	if ids, ok := m.cache.get(word); ok {
		return append(out, ids...)
	}
	var sb symbolBuffer
	syms := m.initialSymbols(word, sb.syms[:0])
	ids := m.mergeSymbols(syms, out)
	if len(word) < maxCachedWordLen {
		m.cache.put(word, ids[len(out):])
	}
	return ids
}

// tokenizeRawBytes is tokenizeWord for byte-level models given the word's raw bytes, before the
// ByteLevel byte→rune mapping. The result equals tokenizeWord(byteLevelMap(word)).
func (m *bpeModel) tokenizeRawBytes(word string, out []int32) []int32 {
	if word == "" {
		return out
	}
	if m.ignoreMerges {
		if id, ok := m.rawVocab[word]; ok {
			return append(out, id)
		}
	}
	if ids, ok := m.cache.get(word); ok {
		return append(out, ids...)
	}
	var sb symbolBuffer
	syms := sb.syms[:0]
	for i := 0; i < len(word); i++ {
		id := m.byteLevelIDs[word[i]]
		if id < 0 {
			// A byte whose rune is missing from the vocabulary: take the general path (unknown
			// token or byte fallback on the mapped rune).
			return m.tokenizeMappedSlow(word, out)
		}
		syms = append(syms, id)
	}
	ids := m.mergeSymbols(syms, out)
	if len(word) < maxCachedWordLen {
		m.cache.put(word, ids[len(out):])
	}
	return ids
}

func (m *bpeModel) tokenizeMappedSlow(word string, out []int32) []int32 {
	syms := m.initialSymbols(byteLevelEncode(word), nil)
	return m.mergeSymbols(syms, out)
}

// symbolBuffer is stack space for the initial symbols of a typical word.
type symbolBuffer struct{ syms [48]int32 }

// initialSymbols splits a word into its characters' ids (HuggingFace's BPE::merge_word before the
// merges): continuing_subword_prefix on every character but the first, end_of_word_suffix on the
// last, byte fallback to <0xNN> tokens, and unknown tokens (fused when fuse_unk).
func (m *bpeModel) initialSymbols(word string, syms []int32) []int32 {
	unkPending := false
	affixes := m.continuingSubwordPrefix != "" || m.endOfWordSuffix != ""
	for i := 0; i < len(word); {
		r, size := utf8.DecodeRuneInString(word[i:])
		char := word[i : i+size]
		isFirst, isLast := i == 0, i+size == len(word)
		i += size

		var id int32
		var ok bool
		if affixes {
			if !isFirst {
				char = m.continuingSubwordPrefix + char
			}
			if isLast {
				char += m.endOfWordSuffix
			}
			id, ok = m.vocab[char]
		} else {
			id, ok = m.runeIDs[r]
		}
		if ok {
			if unkPending {
				syms = append(syms, m.unkID)
				unkPending = false
			}
			syms = append(syms, id)
			continue
		}
		if m.byteFallback {
			// Like HuggingFace: all bytes of the (affixed) character must have a token, and a
			// pending unknown token stays pending across the fallback bytes.
			all := true
			for j := 0; j < len(char); j++ {
				if m.byteTokenIDs[char[j]] < 0 {
					all = false
					break
				}
			}
			if all {
				for j := 0; j < len(char); j++ {
					syms = append(syms, m.byteTokenIDs[char[j]])
				}
				continue
			}
		}
		if m.unkID >= 0 {
			if unkPending && !m.fuseUnk {
				syms = append(syms, m.unkID)
			}
			unkPending = true
		}
	}
	if unkPending {
		syms = append(syms, m.unkID)
	}
	return syms
}

// symbol is one node of the doubly linked list of a word being merged.
type symbol struct {
	id         int32
	prev, next int32 // indices; -1 at the ends
	removed    bool
}

// heapMerge is a candidate merge of the symbol at pos with its right neighbour; key packs
// (rank, pos) so that one comparison orders the heap.
type heapMerge struct {
	key   uint64
	newID int32
}

func newHeapMerge(rank, pos, newID int32) heapMerge {
	return heapMerge{key: uint64(uint32(rank))<<32 | uint64(uint32(pos)), newID: newID}
}

func (h heapMerge) pos() int32 { return int32(uint32(h.key)) }

// shortWordSymbols is where mergeSymbols switches from a linear scan for the best pair to a heap.
const shortWordSymbols = 24

// mergeSymbols applies the merges to a word's initial symbols and appends the result to out.
// The order is HuggingFace's Word::merge_all: always the lowest-ranked adjacent pair, leftmost first.
func (m *bpeModel) mergeSymbols(syms []int32, out []int32) []int32 {
	if len(syms) <= shortWordSymbols {
		return append(out, m.mergeShort(syms)...)
	}
	return m.mergeHeap(syms, out)
}

// mergeShort merges in place by scanning for the best adjacent pair; ranks[i] caches the merge of
// syms[i] and syms[i+1]. Quadratic in the worst case, which is cheaper than a heap for short words.
func (m *bpeModel) mergeShort(syms []int32) []int32 {
	if len(syms) < 2 {
		return syms
	}
	var rankBuf [shortWordSymbols]merge
	pairs := rankBuf[:len(syms)-1]
	const none = int32(-1)
	lookup := func(i int) merge {
		if mg, ok := m.merges[mergeKey(syms[i], syms[i+1])]; ok {
			return mg
		}
		return merge{rank: none}
	}
	for i := range pairs {
		pairs[i] = lookup(i)
	}
	for {
		best := -1
		for i, p := range pairs {
			if p.rank != none && (best < 0 || p.rank < pairs[best].rank) {
				best = i
			}
		}
		if best < 0 {
			return syms
		}
		syms[best] = pairs[best].newID
		syms = append(syms[:best+1], syms[best+2:]...)
		pairs = append(pairs[:best], pairs[best+1:]...)
		if best > 0 {
			pairs[best-1] = lookup(best - 1)
		}
		if best < len(pairs) {
			pairs[best] = lookup(best)
		}
	}
}

// mergeHeap is HuggingFace's Word::merge_all with a typed binary heap: linear in the number of
// symbols times log, with no per-merge allocations.
func (m *bpeModel) mergeHeap(ids []int32, out []int32) []int32 {
	syms := make([]symbol, len(ids))
	for i, id := range ids {
		syms[i] = symbol{id: id, prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(syms)-1].next = -1
	h := make(mergeHeap, 0, len(ids))
	for i := 0; i+1 < len(ids); i++ {
		if mg, ok := m.merges[mergeKey(ids[i], ids[i+1])]; ok {
			h = append(h, newHeapMerge(mg.rank, int32(i), mg.newID))
		}
	}
	h.init()
	for len(h) > 0 {
		top := h.pop()
		pos := top.pos()
		cur := &syms[pos]
		if cur.removed || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// Skip expired entries: the pair at pos changed since this one was pushed.
		if mg, ok := m.merges[mergeKey(cur.id, right.id)]; !ok || mg.newID != top.newID {
			continue
		}
		cur.id = top.newID
		cur.next = right.next
		syms[nextPos].removed = true
		if right.next >= 0 {
			syms[right.next].prev = pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[mergeKey(syms[cur.prev].id, cur.id)]; ok {
				h.push(newHeapMerge(mg.rank, cur.prev, mg.newID))
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[mergeKey(cur.id, syms[cur.next].id)]; ok {
				h.push(newHeapMerge(mg.rank, pos, mg.newID))
			}
		}
	}
	for _, s := range syms {
		if !s.removed {
			out = append(out, s.id)
		}
	}
	return out
}

// mergeHeap is a min-heap of candidate merges ordered by rank, then position.
type mergeHeap []heapMerge

func (h mergeHeap) less(i, j int) bool { return h[i].key < h[j].key }

func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *mergeHeap) push(x heapMerge) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *mergeHeap) pop() heapMerge {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	h.down(0)
	return top
}

func (h mergeHeap) down(i int) {
	for {
		left := 2*i + 1
		if left >= len(h) {
			return
		}
		least := left
		if right := left + 1; right < len(h) && h.less(right, left) {
			least = right
		}
		if !h.less(least, i) {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}

// wordCache is a bounded, concurrency-safe map from a word to its ids. When full it starts over,
// which keeps memory bounded and adapts to the text being encoded.
type wordCache struct {
	mu       sync.RWMutex
	capacity int
	words    map[string][]int32
}

func newWordCache(capacity int) *wordCache {
	return &wordCache{capacity: capacity, words: make(map[string][]int32, capacity)}
}

func (c *wordCache) get(word string) ([]int32, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.RLock()
	ids, ok := c.words[word]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	if c == nil {
		return
	}
	stored := append([]int32(nil), ids...)
	key := strings.Clone(word)
	c.mu.Lock()
	if len(c.words) >= c.capacity {
		clear(c.words)
	}
	c.words[key] = stored
	c.mu.Unlock()
}

// newBPEModel builds the model from its vocabulary and merges (already split into pairs).
func newBPEModel(vocab map[string]int32, merges [][2]string, unk, prefix, suffix string, fuseUnk, byteFallback, ignoreMerges bool) (*bpeModel, error) {
	m := &bpeModel{
		vocab:                   vocab,
		merges:                  make(map[uint64]merge, len(merges)),
		runeIDs:                 make(map[rune]int32, 1024),
		unkID:                   -1,
		fuseUnk:                 fuseUnk,
		byteFallback:            byteFallback,
		ignoreMerges:            ignoreMerges,
		continuingSubwordPrefix: prefix,
		endOfWordSuffix:         suffix,
		cache:                   newWordCache(defaultCacheWords),
	}
	if unk != "" {
		id, ok := vocab[unk]
		if !ok {
			return nil, fmt.Errorf("%w: unk_token %q is not in the vocabulary", ErrMalformed, unk)
		}
		m.unkID = id
	}
	for tok, id := range vocab {
		if r, size := utf8.DecodeRuneInString(tok); size == len(tok) && size > 0 && (r != utf8.RuneError || size == 3) {
			m.runeIDs[r] = id
		}
	}
	for b := range 256 {
		m.byteTokenIDs[b] = -1
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTokenIDs[b] = id
		}
		m.byteLevelIDs[b] = -1
		if id, ok := vocab[string(byteToRune[b])]; ok {
			m.byteLevelIDs[b] = id
		}
	}
	prefixLen := len(prefix)
	var buf []byte
	for rank, pair := range merges {
		left, ok := vocab[pair[0]]
		if !ok {
			return nil, fmt.Errorf("%w: merge %d: token %q is not in the vocabulary", ErrMalformed, rank, pair[0])
		}
		right, ok := vocab[pair[1]]
		if !ok {
			return nil, fmt.Errorf("%w: merge %d: token %q is not in the vocabulary", ErrMalformed, rank, pair[1])
		}
		if len(pair[1]) < prefixLen || pair[1][:prefixLen] != prefix {
			return nil, fmt.Errorf("%w: merge %d: %q lacks the continuing_subword_prefix %q", ErrMalformed, rank, pair[1], prefix)
		}
		buf = append(append(buf[:0], pair[0]...), pair[1][prefixLen:]...)
		newID, ok := vocab[string(buf)] // no allocation for the lookup
		if !ok {
			return nil, fmt.Errorf("%w: merge %d: merged token %q is not in the vocabulary", ErrMalformed, rank, buf)
		}
		// A repeated pair keeps its last rank, as HuggingFace's HashMap collect does.
		m.merges[mergeKey(left, right)] = merge{rank: int32(rank), newID: newID}
	}
	return m, nil
}

// enableRawByteLevel prepares tokenizeRawBytes: the vocabulary keyed by the raw bytes each
// byte-level token stands for.
func (m *bpeModel) enableRawByteLevel() {
	if !m.ignoreMerges {
		return
	}
	m.rawVocab = make(map[string]int32, len(m.vocab))
	for tok, id := range m.vocab {
		if raw, ok := byteLevelDecodeStrict(tok); ok {
			m.rawVocab[raw] = id
		}
	}
}

// defaultCacheWords bounds the word cache (HuggingFace uses 10,000).
const defaultCacheWords = 1 << 15
