// Package attention owns the paged KV layout, the KV write by slot mapping, causal prefill attention over
// pages and decode attention (the grouped and split-k algorithms and the pure dispatcher that picks one).
// The CPU code here is the specification of the GPU kernels. It must not know about sequences' lifetimes,
// scheduling or sampling: block tables, slot mappings and context lengths arrive as plain slices.
//
// # Layout
//
// A Cache holds one layer's K and V pools, each [NumBlocks][BlockSize][NumKVHeads][HeadDim] float32, or
// FP8 e4m3 with a K and a V scale (NewFP8Cache; Cache.WithScales gives each layer sharing a page array
// its own scales). A token lives at slot = block·BlockSize + offset; Cache.Write stores a step's K/V
// rows by slot mapping (a negative slot is a padding token; FP8 stores e4m3(x/scale), saturating). A
// sequence's pages are listed, in logical order, by its block table; the pages themselves may lie
// anywhere in the pool. Every kernel reads an FP8 page as float32(e4m3)·scale, row by row as it loads
// the page, and then computes exactly as over float32 pages.
//
// # Attention
//
// Attend computes causal attention for one step laid out like vLLM's varlen batches: a flat list of query
// rows, sequence s owning rows [QueryStart[s], QueryStart[s+1]), with ContextLens[s] the context after
// the step. Rows of a prefill chunk attend to the cached prefix and to the chunk up to themselves; decode
// rows (one per sequence) go through Plan, which picks one of the two decode algorithms:
//
//   - DecodeGrouped: one unit of work per (sequence, KV head) serving all query heads of the group, so
//     the cache is read once per KV head, not once per query head;
//   - DecodeSplitK: one unit per (sequence, KV head, partition of the context), each leaving the online
//     softmax state (m, l, acc), merged by a log-sum-exp reduce; it keeps every worker (SM) busy when
//     there are few sequences with long contexts.
//
// With a sliding window (Batch.Window, Mistral's and Gemma's windowed layers) a query attends to its last
// Window positions only: every unit starts its walk at the first page its queries attend to, the pages
// before it are never read (a KV pool may have given them back), and Plan is given the span of pages a
// decode reads instead of its context, so a long context behind a short window is planned as the short
// read it is.
//
// Decodes whose block tables begin with the same pages (FindSharedGroups) may run the shared-prefix
// algorithm instead (DecodeShared, Batch.Shared; DecideShared on the GPU): the shared pages are read once
// for a group by units whose query rows are several members' heads, each sequence's own pages by units of
// its own, and the two partial states are merged by the split-k log-sum-exp reduce (shared.go). A step
// captured into a CUDA graph is planned by DecideSharedGraph on a bucket of its groups (SharedGraphKey,
// SharedLayout.Pad), whose launches every step of the bucket shares.
//
// Every unit walks its pages one page at a time with online softmax in float32 (the GPU kernels' tile
// loop); units are spread over runtime.GOMAXPROCS(0) goroutines, and Plan is given that number as the
// machine's size. The GPU kernels (built with the cuda tag) follow the same structure and are tested
// against these functions; which of them a GPU call runs, and how, is Decide's (dispatch.go), a pure
// function of the call's shape and the device's facts that CUDAKernels only executes. On request (CUDADecodeArgs.RoPE) the GPU decode kernels also rotate the step's
// queries and newest key and store its K/V row themselves, the model's RoPE step folded into them; the
// rotation's formula stays the model's (it mirrors model/kernels/rope.cu), this package only runs it.
//
// Shape mismatches are programmer errors and panic with a message saying which.
package attention
