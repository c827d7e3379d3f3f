package kvcache

import (
	"errors"
	"fmt"
	"slices"
)

// SeqID identifies a sequence in a [Pool]. The caller (the engine) chooses ids; a pool holds at most
// one allocation per id at a time, and an id may be reused after [Pool.Free].
type SeqID uint64

// Sentinel errors returned (wrapped) by [Pool] methods; test them with errors.Is.
var (
	// ErrNoFreeBlocks means the pool has too few free and evictable blocks for the request. The
	// pool is unchanged.
	ErrNoFreeBlocks = errors.New("kvcache: no free blocks")
	// ErrUnknownSeq means the sequence id has no allocation in the pool.
	ErrUnknownSeq = errors.New("kvcache: unknown sequence")
	// ErrDuplicateSeq means Allocate was called for an id that already has an allocation.
	ErrDuplicateSeq = errors.New("kvcache: sequence already allocated")
)

// Config sizes a [Pool].
type Config struct {
	// NumBlocks is the number of blocks (pages) in the pool; > 0.
	NumBlocks int
	// BlockSize is the number of token slots per block; > 0.
	BlockSize int
	// PrefixCaching enables sharing of computed full blocks between sequences with the same prefix.
	PrefixCaching bool
	// HashSeed is mixed into every block hash. Any fixed value works; it exists so that hashes are a
	// property of the pool, not of global state.
	HashSeed uint64
	// Groups are the KV groups: sets of layers whose pages a sequence holds in a block table of their
	// own, all taken from the one pool of NumBlocks blocks (see the package doc). nil means one group
	// without a window. Put a group without a window first when there is one: group 0 anchors the
	// prefix cache.
	Groups []Group
}

// Group describes one KV group.
type Group struct {
	// Window, when positive, says the group's layers attend to the last Window positions only (a
	// sliding window, the query's own included): once every query to come lies past a page's
	// positions by Window or more, the sequence gives the page back and its table entry becomes
	// NullBlock.
	Window int
}

// NullBlock is the block-table entry of a sliding group's page that the sequence does not hold:
// given back behind the window, or never allocated because the window of the sequence's first
// computed token starts after it.
const NullBlock int32 = -1

// noBlock marks an empty link in the LRU list.
const noBlock = -1

// block is the bookkeeping of one physical block.
type block struct {
	ref int32 // number of sequences whose table holds the block

	// Set while the block is registered in the prefix cache (it is full and its KV computed).
	hashed bool
	hash   uint64 // chained hash of the prefix ending with this block
	parent uint64 // hash of the parent block (rootHash for the first block)
	index  int32  // position of the block in its sequences' tables
	gen    uint64 // registration number, unique over the pool's life: tells a re-registration apart
	// parentBlock is the registered block holding the previous block of the prefix (noBlock for
	// the first block). A hit must come through it, so the chain of a hit is the chain of physical
	// blocks its KV was computed after, whatever the hashes say.
	parentBlock int32
	// Registered children (blocks whose parentBlock is this one), as a doubly linked list.
	firstChild, prevSibling, nextSibling int32

	// Links in the evictable LRU list, valid while hashed && ref == 0.
	prev, next int32

	// A registered block of a group other than the anchor (group 0) is a twin: it holds the same
	// prefix as anchor block twinOf registered as twinGen, for group twinGroup. The anchor block lists
	// its twins from firstTwin through nextTwin, so that evicting it unregisters them too.
	twinOf, firstTwin, nextTwin int32
	twinGroup                   int32
	twinGen                     uint64
}

// twinKey finds the twin of group holding the prefix of anchor block anchor registered as gen.
type twinKey struct {
	group  int32
	anchor int32
	gen    uint64
}

// sequence is the pool's view of one sequence.
type sequence struct {
	// tables[g] lists group g's physical block ids (NullBlock for a sliding group's pages it does not
	// hold); each has BlocksFor(len(tokens), blockSize) entries.
	tables [][]int32
	tokens []int32 // every token that holds a slot
	// behind[g] is how many leading entries of a sliding group's table are NullBlock; twinned[g] how
	// many leading full blocks of group g ≥ 1 were considered for registration as twins.
	behind, twinned []int
	// chain[i] is the registered block that holds the sequence's full block i (its own block, a
	// prefix-cache hit, or an identical block another sequence registered first), registered as
	// chainGen[i]; it covers the first len(chain) full blocks (hits and committed).
	chain     []int32
	chainGen  []uint64
	broken    bool // the chain can no longer grow (an entry of it was evicted, or a hash collided)
	committed int  // tokens whose KV the caller has written (see Commit)
	// queried and hits are what Allocate added to the pool's lookup statistics (see Unallocate).
	queried, hits int
}

// Pool is a block pool with reference counts, per-sequence block tables and a prefix cache.
// The zero value is not usable; create one with [NewPool]. A Pool is not safe for concurrent use.
type Pool struct {
	blockSize     int
	prefixCaching bool
	seed          uint64
	groups        []Group

	blocks      []block
	blockTokens []int32 // token ids of registered blocks, blockSize per block (prefix caching only)

	free      []int32 // unregistered blocks with ref 0 (a stack)
	lruHead   int32   // least recently freed evictable block
	lruTail   int32   // most recently freed evictable block
	numCached int     // evictable blocks: registered, ref 0
	numUsed   int     // blocks with ref > 0
	numShared int     // blocks with ref > 1
	lastGen   uint64  // the last registration number handed out
	scratch   []int32 // reused by unregister

	byHash map[uint64]int32
	twins  map[twinKey]int32
	seqs   map[SeqID]*sequence

	queriedTokens int64
	hitTokens     int64
}

// NewPool returns a pool of cfg.NumBlocks free blocks.
func NewPool(cfg Config) (*Pool, error) {
	if cfg.NumBlocks <= 0 {
		return nil, fmt.Errorf("kvcache: NumBlocks must be positive, got %d", cfg.NumBlocks)
	}
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("kvcache: BlockSize must be positive, got %d", cfg.BlockSize)
	}
	if int64(cfg.NumBlocks)*int64(cfg.BlockSize) > 1<<31-1 {
		return nil, fmt.Errorf("kvcache: %d blocks of %d slots overflow int32 slot ids", cfg.NumBlocks, cfg.BlockSize)
	}
	groups := cfg.Groups
	if groups == nil {
		groups = []Group{{}}
	}
	for g, grp := range groups {
		if grp.Window < 0 {
			return nil, fmt.Errorf("kvcache: group %d: window %d is negative", g, grp.Window)
		}
	}
	p := &Pool{
		blockSize:     cfg.BlockSize,
		prefixCaching: cfg.PrefixCaching,
		seed:          cfg.HashSeed,
		groups:        slices.Clone(groups),
		twins:         make(map[twinKey]int32),
		blocks:        make([]block, cfg.NumBlocks),
		free:          make([]int32, cfg.NumBlocks),
		lruHead:       noBlock,
		lruTail:       noBlock,
		byHash:        make(map[uint64]int32),
		seqs:          make(map[SeqID]*sequence),
	}
	if cfg.PrefixCaching {
		p.blockTokens = make([]int32, cfg.NumBlocks*cfg.BlockSize)
	}
	for i := range p.blocks {
		p.blocks[i].resetLinks()
		// Pop order 0, 1, 2, ...: the stack holds the highest id at the bottom.
		p.free[i] = int32(cfg.NumBlocks - 1 - i)
	}
	return p, nil
}

// BlockSize returns the number of token slots per block.
func (p *Pool) BlockSize() int { return p.blockSize }

// NumBlocks returns the number of blocks in the pool.
func (p *Pool) NumBlocks() int { return len(p.blocks) }

// PrefixCaching reports whether the pool shares computed blocks between sequences.
func (p *Pool) PrefixCaching() bool { return p.prefixCaching }

// Groups returns the pool's KV groups (one without a window when Config.Groups was nil).
func (p *Pool) Groups() []Group { return slices.Clone(p.groups) }

// NumGroups returns the number of KV groups.
func (p *Pool) NumGroups() int { return len(p.groups) }

// MaxTokens returns the most tokens one sequence can hold in the empty pool: a sequence holds a block
// of every group for each page of its tokens when it is allocated.
func (p *Pool) MaxTokens() int { return len(p.blocks) / len(p.groups) * p.blockSize }

// BlocksNeeded returns the blocks a sequence of numTokens tokens takes when it is allocated without
// prefix-cache hits: one of every group per page.
func (p *Pool) BlocksNeeded(numTokens int) int {
	return len(p.groups) * BlocksFor(numTokens, p.blockSize)
}

// BlocksFor returns the number of blocks of blockSize slots needed to hold numTokens tokens.
func BlocksFor(numTokens, blockSize int) int {
	return (numTokens + blockSize - 1) / blockSize
}

// CanAllocate reports whether [Pool.Allocate] of tokens would succeed now, and how many leading
// tokens it would take from the prefix cache. It changes nothing, not even the hit statistics.
func (p *Pool) CanAllocate(tokens []int32) (cachedTokens int, ok bool) {
	if len(tokens) == 0 {
		return 0, false
	}
	k, hits, _ := p.lookupGroups(tokens)
	return k * p.blockSize, p.newBlocksAvailable(hits) >= p.newBlocksNeeded(len(tokens), k)
}

// Allocate creates the block tables of sequence id with a slot for every token of tokens (a prompt,
// or a preempted sequence's prompt and output) in every group. Leading full blocks found in the prefix
// cache are shared instead of allocated; cachedTokens is the number of leading tokens whose KV is
// therefore already there (a multiple of BlockSize, at most len(tokens)-1), in every group (a sliding
// group needs, and holds, only the pages in the window of the first token it computes). On failure
// the pool is unchanged; the error wraps [ErrNoFreeBlocks] or [ErrDuplicateSeq].
func (p *Pool) Allocate(id SeqID, tokens []int32) (cachedTokens int, err error) {
	return p.allocate(id, tokens, true)
}

// AllocateUncached is Allocate without the prefix-cache lookup: every block is new and no token's KV
// is there yet (the sequence computes them all), and the lookup statistics do not count it. Its
// blocks join the prefix cache as their KV is committed, as any sequence's do. It serves a sequence
// that needs every prompt position's logits (prompt logprobs), as vLLM skips the cache for them.
func (p *Pool) AllocateUncached(id SeqID, tokens []int32) error {
	_, err := p.allocate(id, tokens, false)
	return err
}

func (p *Pool) allocate(id SeqID, tokens []int32, lookup bool) (cachedTokens int, err error) {
	if len(tokens) == 0 {
		return 0, fmt.Errorf("kvcache: allocate sequence %d: no tokens", id)
	}
	if _, ok := p.seqs[id]; ok {
		return 0, fmt.Errorf("kvcache: allocate sequence %d: %w", id, ErrDuplicateSeq)
	}
	k, hits, chain := 0, make([][]int32, len(p.groups)), []int32(nil)
	if lookup {
		k, hits, chain = p.lookupGroups(tokens)
	}
	numBlocks := BlocksFor(len(tokens), p.blockSize)
	if need, have := p.newBlocksNeeded(len(tokens), k), p.newBlocksAvailable(hits); need > have {
		return 0, fmt.Errorf("kvcache: allocate sequence %d: %d tokens need %d new blocks, %d available: %w",
			id, len(tokens), need, have, ErrNoFreeBlocks)
	}
	s := &sequence{
		tables:    make([][]int32, len(p.groups)),
		tokens:    append(make([]int32, 0, len(tokens)), tokens...),
		behind:    make([]int, len(p.groups)),
		twinned:   make([]int, len(p.groups)),
		committed: k * p.blockSize,
	}
	// Every group's hits first: taking a new block may evict an evictable block, which must not be
	// one of them.
	for g := range p.groups {
		table := make([]int32, 0, numBlocks)
		for _, b := range hits[g] {
			if b != NullBlock {
				p.acquire(b)
			}
			table = append(table, b)
		}
		s.tables[g] = table
		s.behind[g] = p.firstNeeded(g, s.committed)
		s.twinned[g] = k
	}
	for g, table := range s.tables {
		for len(table) < numBlocks {
			table = append(table, p.take())
		}
		s.tables[g] = table
	}
	// The anchor chain holds every hit, those below a sliding anchor group's window included, which
	// the sequence does not hold: the chain is what confirms the blocks registered after it.
	s.chain = slices.Clone(chain[:k])
	s.chainGen = make([]uint64, k)
	for i, b := range s.chain {
		s.chainGen[i] = p.blocks[b].gen
	}
	p.seqs[id] = s
	if lookup {
		s.queried, s.hits = len(tokens), s.committed
	}
	p.queriedTokens += int64(s.queried)
	p.hitTokens += int64(s.hits)
	return s.committed, nil
}

// Unallocate undoes Allocate for sequence id: its blocks are freed as Free frees them, and its
// prefix-cache lookup leaves the hit statistics. It is for an allocation given back before any of its
// KV was computed (a scheduled step that is cancelled), so that the admission which follows counts the
// prompt once. The error wraps [ErrUnknownSeq] if id has no allocation.
func (p *Pool) Unallocate(id SeqID) error {
	s, ok := p.seqs[id]
	if !ok {
		return fmt.Errorf("kvcache: unallocate sequence %d: %w", id, ErrUnknownSeq)
	}
	p.queriedTokens -= int64(s.queried)
	p.hitTokens -= int64(s.hits)
	return p.Free(id)
}

// CanAppend reports whether [Pool.Append] of n more tokens to sequence id would succeed now.
func (p *Pool) CanAppend(id SeqID, n int) bool {
	s, ok := p.seqs[id]
	if !ok || n < 0 {
		return false
	}
	return len(p.groups)*(BlocksFor(len(s.tokens)+n, p.blockSize)-len(s.tables[0])) <= len(p.free)+p.numCached
}

// Append gives the tokens (typically the one token sampled in the last step) a slot at the end of
// sequence id in every group, allocating blocks as needed. The last block of a sequence is never
// shared, so the new slots are always private. On failure the pool is unchanged; the error wraps
// [ErrNoFreeBlocks] or [ErrUnknownSeq].
func (p *Pool) Append(id SeqID, tokens ...int32) error {
	s, ok := p.seqs[id]
	if !ok {
		return fmt.Errorf("kvcache: append to sequence %d: %w", id, ErrUnknownSeq)
	}
	numBlocks := BlocksFor(len(s.tokens)+len(tokens), p.blockSize)
	if need, have := len(p.groups)*(numBlocks-len(s.tables[0])), len(p.free)+p.numCached; need > have {
		return fmt.Errorf("kvcache: append %d tokens to sequence %d: %d new blocks needed, %d available: %w",
			len(tokens), id, need, have, ErrNoFreeBlocks)
	}
	for g, table := range s.tables {
		for len(table) < numBlocks {
			table = append(table, p.take())
		}
		s.tables[g] = table
	}
	s.tokens = append(s.tokens, tokens...)
	return nil
}

// NumAvailableBlocks returns how many blocks could be taken for new slots now (by Append or
// Allocate, prefix-cache hits aside): the free blocks and the evictable prefix-cache blocks.
func (p *Pool) NumAvailableBlocks() int { return len(p.free) + p.numCached }

// SetToken replaces the token id at position pos of sequence id, which must hold a slot and not
// be committed yet (pos in [committed, NumTokens)). It lets a caller reserve a slot with a
// placeholder token (pipelined decoding appends the token a step will sample before it is known)
// and fill in the real id once it is. Only committed full blocks are hashed into the prefix cache,
// so a block is registered with the real token, never the placeholder. The error wraps
// [ErrUnknownSeq], or says pos is out of range or committed.
func (p *Pool) SetToken(id SeqID, pos int, tok int32) error {
	s, ok := p.seqs[id]
	if !ok {
		return fmt.Errorf("kvcache: set token of sequence %d: %w", id, ErrUnknownSeq)
	}
	if pos < s.committed || pos >= len(s.tokens) {
		return fmt.Errorf("kvcache: set token of sequence %d: position %d outside the uncommitted range [%d, %d)",
			id, pos, s.committed, len(s.tokens))
	}
	s.tokens[pos] = tok
	return nil
}

// Truncate drops the trailing tokens of sequence id down to n, which must not be below its
// committed count nor above its token count, and returns the blocks no longer needed to the free
// list (they hold uncommitted positions only, so they are private and not in the prefix cache). It
// undoes an Append whose step did not run. Block table views handed out before stay unchanged: a
// later Append gets a fresh table array rather than overwriting theirs. The error wraps
// [ErrUnknownSeq], or says n is out of range.
func (p *Pool) Truncate(id SeqID, n int) error {
	s, ok := p.seqs[id]
	if !ok {
		return fmt.Errorf("kvcache: truncate sequence %d: %w", id, ErrUnknownSeq)
	}
	if n < s.committed || n > len(s.tokens) {
		return fmt.Errorf("kvcache: truncate sequence %d to %d tokens: outside [%d committed, %d tokens]",
			id, n, s.committed, len(s.tokens))
	}
	s.tokens = s.tokens[:n]
	keep := BlocksFor(n, p.blockSize)
	for g, table := range s.tables {
		if keep == len(table) {
			continue
		}
		for i := len(table) - 1; i >= keep; i-- {
			p.release(table[i])
		}
		s.tables[g] = table[:keep:keep]
	}
	return nil
}

// Commit records that the KV of the first numComputed tokens of sequence id has been written. With
// prefix caching, every full block among them becomes a cache entry that later allocations can
// share. Then each sliding group gives back the pages that no query from position numComputed on can
// see (their table entries become NullBlock; a registered one stays in the prefix cache). Commit never
// lowers the committed count; numComputed beyond the sequence's tokens is an error.
func (p *Pool) Commit(id SeqID, numComputed int) error {
	s, ok := p.seqs[id]
	if !ok {
		return fmt.Errorf("kvcache: commit sequence %d: %w", id, ErrUnknownSeq)
	}
	if numComputed < 0 || numComputed > len(s.tokens) {
		return fmt.Errorf("kvcache: commit sequence %d: %d computed tokens out of range [0, %d]", id, numComputed, len(s.tokens))
	}
	if numComputed <= s.committed {
		return nil
	}
	s.committed = numComputed
	if p.prefixCaching {
		p.register(s)
		p.registerTwins(s)
	}
	p.releaseBehind(s)
	return nil
}

// Free releases the blocks of sequence id. Registered blocks stay in the prefix cache until evicted;
// the others return to the free list. The error wraps [ErrUnknownSeq] if id has no allocation.
func (p *Pool) Free(id SeqID) error {
	s, ok := p.seqs[id]
	if !ok {
		return fmt.Errorf("kvcache: free sequence %d: %w", id, ErrUnknownSeq)
	}
	// Release the tail first so that, among blocks freed together, the deepest ones are evicted
	// first and shared prefixes (the heads) survive longest; the anchor group last.
	for g := len(s.tables) - 1; g >= 0; g-- {
		table := s.tables[g]
		for i := len(table) - 1; i >= 0; i-- {
			if table[i] != NullBlock {
				p.release(table[i])
			}
		}
	}
	delete(p.seqs, id)
	return nil
}

// BlockTable returns group 0's block table of sequence id: the physical block of positions
// [i*BlockSize, (i+1)*BlockSize) is table[i]. The slice is a read-only view whose entries never
// change, but for a sliding group's pages given back behind the window (NullBlock from the Commit that
// gives them back on); a later Append may make the sequence's table longer than this view.
func (p *Pool) BlockTable(id SeqID) ([]int32, error) {
	s, ok := p.seqs[id]
	if !ok {
		return nil, fmt.Errorf("kvcache: block table of sequence %d: %w", id, ErrUnknownSeq)
	}
	return s.tables[0][:len(s.tables[0]):len(s.tables[0])], nil
}

// BlockTables returns the block tables of sequence id, one per group (as BlockTable returns group 0's).
func (p *Pool) BlockTables(id SeqID) ([][]int32, error) {
	s, ok := p.seqs[id]
	if !ok {
		return nil, fmt.Errorf("kvcache: block tables of sequence %d: %w", id, ErrUnknownSeq)
	}
	out := make([][]int32, len(s.tables))
	for g, table := range s.tables {
		out[g] = table[:len(table):len(table)]
	}
	return out, nil
}

// NumTokens returns the number of tokens of sequence id that hold a slot.
func (p *Pool) NumTokens(id SeqID) (int, error) {
	s, ok := p.seqs[id]
	if !ok {
		return 0, fmt.Errorf("kvcache: tokens of sequence %d: %w", id, ErrUnknownSeq)
	}
	return len(s.tokens), nil
}

// NumSeqs returns the number of sequences holding an allocation.
func (p *Pool) NumSeqs() int { return len(p.seqs) }

// newBlocksAvailable returns how many blocks could be taken for new slots if the hit blocks (of every
// group) were acquired first: free and evictable blocks, less the evictable ones among the hits.
func (p *Pool) newBlocksAvailable(hits [][]int32) int {
	n := len(p.free) + p.numCached
	for _, group := range hits {
		for _, b := range group {
			if b != NullBlock && p.blocks[b].ref == 0 {
				n--
			}
		}
	}
	return n
}

// newBlocksNeeded returns how many new blocks an allocation of numTokens tokens takes when its first
// k pages are prefix-cache hits (or not needed, below a sliding group's window): the later pages, in
// every group.
func (p *Pool) newBlocksNeeded(numTokens, k int) int {
	return len(p.groups) * (BlocksFor(numTokens, p.blockSize) - k)
}

// firstNeeded returns the first page of group g that a sequence with computed tokens needs: 0, or for
// a sliding group the page of the first position the query at position computed attends to.
func (p *Pool) firstNeeded(g, computed int) int {
	w := p.groups[g].Window
	if w == 0 {
		return 0
	}
	return max(0, computed-w+1) / p.blockSize
}

// take returns a block with ref 1 for new slots: a free block if there is one, else the least
// recently used evictable block, which leaves the prefix cache. The caller has checked availability.
func (p *Pool) take() int32 {
	var b int32
	if n := len(p.free); n > 0 {
		b = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		b = p.lruHead
		if b == noBlock {
			panic("kvcache: take from an exhausted pool")
		}
		p.lruRemove(b)
		p.unregister(b)
	}
	p.blocks[b].ref = 1
	p.numUsed++
	return b
}

// acquire adds a reference to a registered block found in the prefix cache.
func (p *Pool) acquire(b int32) {
	blk := &p.blocks[b]
	if blk.ref == 0 {
		p.lruRemove(b)
		p.numUsed++
	}
	blk.ref++
	if blk.ref == 2 {
		p.numShared++
	}
}

// release drops a reference; a block nobody holds becomes evictable (registered) or free.
func (p *Pool) release(b int32) {
	blk := &p.blocks[b]
	if blk.ref <= 0 {
		panic(fmt.Sprintf("kvcache: release of block %d with ref %d", b, blk.ref))
	}
	blk.ref--
	if blk.ref == 1 {
		p.numShared--
	}
	if blk.ref > 0 {
		return
	}
	p.numUsed--
	if blk.hashed {
		p.lruPushBack(b)
	} else {
		p.free = append(p.free, b)
	}
}
