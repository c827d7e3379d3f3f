package scheduler

// Chunk is one sequence's share of a step: Len consecutive tokens starting at position Start, with
// everything the model needs to run them over the paged KV cache.
type Chunk struct {
	// Seq is the sequence; read only.
	Seq *Sequence
	// Start is the position of the chunk's first token (the sequence's NumComputed before the step).
	Start int
	// Len is the number of tokens in the chunk; 1 for a decode.
	Len int
	// Offset is the index of the chunk's first token in the batch's flat slices (TokenIDs,
	// Positions, SlotMapping): the chunk's query start.
	Offset int
	// Tokens are the input token ids, Seq.Tokens()[Start:Start+Len]; a part of Batch.TokenIDs. For
	// a decode in a batch made by [Scheduler.ScheduleNext] the token is not known yet and Tokens
	// holds 0 (see Batch.InputFrom).
	Tokens []int32
	// BlockTable is the sequence's block table (physical block ids) of KV group 0, covering at least
	// ContextLen positions. Read only; its entries never change (but for a sliding group's pages given
	// back behind the window, see kvcache.Pool.BlockTable).
	BlockTable []int32
	// BlockTables holds the sequence's block table of every KV group (BlockTables[0] is BlockTable).
	BlockTables [][]int32
	// SlotMapping holds the cache slot of each of the chunk's tokens: the model writes the KV of
	// token i at slot SlotMapping[i] (block*BlockSize + offset). A part of Batch.SlotMapping.
	SlotMapping []int32
	// ContextLen is Start+Len: the number of positions the chunk's last token attends to.
	ContextLen int
	// NeedsLogits is true when the chunk ends at the sequence's last token (a decode, or the last
	// chunk of a prompt): the model must produce logits for its last token and the engine must
	// sample one token for it.
	NeedsLogits bool
}

// AppendPositions appends the positions Start, Start+1, ..., Start+Len-1 to dst and returns it.
func (c *Chunk) AppendPositions(dst []int32) []int32 {
	for p := c.Start; p < c.Start+c.Len; p++ {
		dst = append(dst, int32(p))
	}
	return dst
}

// Batch is one step's work, returned by [Scheduler.Schedule] (or [Scheduler.ScheduleNext]) and
// handed back to [Scheduler.Update] or [Scheduler.Discard].
//
// The model's flat step is the concatenation of Chunks in order: decodes first (Len 1 each), then
// prefill chunks. The engine samples one token for every chunk with NeedsLogits, in chunk order.
type Batch struct {
	// Chunks holds Chunks[:NumDecodes] decodes, then prefill chunks (prompt or recompute).
	Chunks []Chunk
	// NumDecodes is the number of leading decode chunks.
	NumDecodes int
	// NumTokens is the sum of the chunks' Len; never above Config.MaxNumBatchedTokens.
	NumTokens int
	// TokenIDs, Positions and SlotMapping are the step's flat inputs: the chunks' tokens, their
	// positions in their sequences and their cache slots, concatenated in chunk order (NumTokens
	// each); chunk c's part is [c.Offset, c.Offset+c.Len).
	TokenIDs, Positions, SlotMapping []int32
	// LogitIndices holds, for each chunk with NeedsLogits in chunk order, the flat index of its
	// last token (c.Offset+c.Len-1): the rows whose logits the engine samples (NumLogits of them).
	LogitIndices []int32
	// NumLogits is the number of chunks with NeedsLogits: the length Update expects of sampled.
	NumLogits int
	// InputFrom is nil for a batch made by Schedule. For a batch made by ScheduleNext(prev), it
	// has one entry per token row (NumTokens, like TokenIDs): −1 where the row's token is known
	// (TokenIDs[row]: prefill rows), else the index into prev's sampled tokens (prev's logits rows,
	// in prev's chunk order) of the token that is the row's input, which the device copies into
	// TokenIDs[row] (a 0 stand-in here) before running the step. Those rows are the decodes', one
	// each: InputFrom[c.Offset] for decode chunk c.
	InputFrom []int32
	// Preempted lists the sequences preempted while scheduling this step: their blocks were freed
	// and they wait at the head of the queue to be recomputed. Informational.
	Preempted []*Sequence
	// Finished lists the sequences the scheduler finished while scheduling this step (FinishError:
	// they can never fit the KV pool). Their blocks are already free; the engine must report them.
	Finished []*Sequence

	step     uint64      // the scheduler step that produced the batch
	admitted []admission // sequences ScheduleNext admitted for this batch, in order
}

// Decodes returns the decode chunks.
func (b *Batch) Decodes() []Chunk { return b.Chunks[:b.NumDecodes] }

// Prefills returns the prefill chunks.
func (b *Batch) Prefills() []Chunk { return b.Chunks[b.NumDecodes:] }

// Empty reports whether the batch has no chunk to run.
func (b *Batch) Empty() bool { return len(b.Chunks) == 0 }
