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
