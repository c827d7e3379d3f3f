// Package kvcache owns the KV block pool: which fixed-size pages (blocks) of the paged KV cache
// belong to which sequence, their reference counts, per-sequence block tables, and the prefix cache
// that lets a new sequence reuse the blocks of an earlier one with the same prompt prefix.
//
// It is pure Go bookkeeping: it never touches a device or KV data. The model reads and writes the
// pages; this package only says which page a token position lives in (see [SlotMapping]).
//
// # Blocks and tables
//
// A [Pool] holds NumBlocks blocks of BlockSize token slots each. A sequence gets a block table
// (a list of physical block ids, one per BlockSize positions) with [Pool.Allocate] and grows it with
// [Pool.Append]; [Pool.Free] gives its blocks back. Token position p of a sequence lives in slot
// table[p/BlockSize]*BlockSize + p%BlockSize.
//
// A slot can be reserved before its token is known: Append a placeholder, then [Pool.SetToken]
// the real id before the position is committed, or [Pool.Truncate] the placeholder away (pipelined
// decoding, where a step is scheduled before the previous step's token is sampled).
//
// # Prefix caching
//
// Every full block whose KV has been computed ([Pool.Commit]) is registered under a 64-bit hash
// chained over its parent block's hash and its own token ids. [Pool.Allocate] walks a new prompt
// block by block and reuses every registered block that matches. The hash only finds a candidate: a
// hit is confirmed by comparing the token ids and by checking that the candidate's parent is the
// physical block of the previous hit, so the hits are exactly the blocks whose KV was computed after
// this prompt's prefix. Two different prefixes whose hashes collide (by chance, or crafted against
// FNV, the way CVE-2025-25183 leaked KV across vLLM requests) cost a miss, never another request's
// KV. A registered block stays findable only while its parent is registered: evicting a block drops
// its registered descendants too.
//
// Only full blocks are shared, and the last prompt token is never taken from the cache (the model
// must compute it to produce logits), so a sequence never writes into a block that another sequence
// can read. When a sequence is freed its registered blocks stay cached (reference count 0,
// "evictable") and are evicted least recently used first, and only when no never-used or
// unregistered free block is left.
//
// # KV groups and sliding windows
//
// A model whose layers attend differently (Gemma 3's five sliding-window layers to one full one,
// Ministral's three to one, Mistral's windows on every layer) gives the pool its KV groups
// (Config.Groups): sets of layers, of equal size, whose pages a sequence holds in a block table of their
// own, every group drawing its blocks from the one pool (a block is one page of each layer of a group,
// so the model's memory per block does not depend on the group). This is vLLM's hybrid allocator: a
// group without a window holds every page of its sequence, a sliding group (Group.Window W) only the
// pages that queries still to come can see: when Commit moves a sequence past a page by W positions,
// the page goes back to the pool and its table entry becomes NullBlock. A sequence is allocated a
// block of every group for each page (all or nothing, as before), and holds only the window's pages of
// its sliding groups from then on, so a 128k-token Gemma 3 sequence holds about a sixth of what it would
// without windows, and the pool holds that many more sequences.
//
// The prefix cache spans the groups. Group 0 is the anchor (put a group without a window first): its
// registered blocks form the confirmed chains described above. The committed full blocks of the other
// groups are registered as twins of the anchor block holding the same prefix (the chain entry of the
// same page), and leave the cache with it. A hit of k pages needs the anchor's chain over them, the
// twins of every page in every group without a window, and in each sliding group the twins of the
// pages that the window of the first computed token (position k·BlockSize) covers; the pages below that
// window are neither needed nor held (NullBlock from the start). The longest k that every group can
// serve is taken: a sliding group whose window pages were given back and evicted stops the hit there,
// never serves it. With a sliding anchor (every layer slides), the chain's blocks below the window stay
// in the cache only until evicted, and the chain (so the prefix) ends there.
//
// # What it must not do
//
// It does not schedule (that is package scheduler), allocate device memory or know about requests.
// A Pool is not safe for concurrent use: one goroutine (the engine's step loop) owns it.
//
// # Example
//
//	pool, err := kvcache.NewPool(kvcache.Config{NumBlocks: 1024, BlockSize: 16, PrefixCaching: true})
//	cached, err := pool.Allocate(id, promptTokens) // cached: prompt tokens whose KV is reused
//	table, _ := pool.BlockTable(id)
//	slots := kvcache.SlotMapping(nil, table, pool.BlockSize(), cached, len(promptTokens))
//	// ... the model writes KV for positions [cached, len) into slots ...
//	pool.Commit(id, len(promptTokens)) // full blocks become shareable
//	pool.Append(id, nextToken)          // room for the next position
//	pool.Free(id)                       // blocks stay cached for reuse until evicted
package kvcache
