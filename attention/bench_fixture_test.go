package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// benchShape is one decode shape of a benchmark.
type benchShape struct {
	batch, ctx, numHeads, kvHeads, headDim int
}

func (s benchShape) String() string {
	return fmt.Sprintf("b%d_ctx%d_hq%d_hkv%d_d%d", s.batch, s.ctx, s.numHeads, s.kvHeads, s.headDim)
}

// benchShapes are LLaMA-3-8B-like decode steps (GQA group 4), an MHA step and an MQA step.
var benchShapes = []benchShape{
	{1, 256, 32, 8, 128},
	{1, 4096, 32, 8, 128},
	{8, 1024, 32, 8, 128},
	{1, 16384, 32, 1, 128},
	{4, 2048, 12, 12, 128},
}

// benchDecode is a decode batch in a page-16 cache with a random page permutation, and the bytes of K/V
// one decode step must read.
type benchDecode struct {
	cache    *Cache
	tables   [][]int32
	lens     []int32
	q, out   []float32
	numHeads int
	scale    float32
	kvBytes  int64
}

func newBenchDecode(b *testing.B, s benchShape) *benchDecode {
	b.Helper()
	const blockSize = 16
	rng := rand.New(rand.NewPCG(1, 1))
	pages := ceilDiv(s.ctx, blockSize)
	c := NewCache(s.batch*pages, blockSize, s.kvHeads, s.headDim)
	for i := range c.K {
		c.K[i] = rng.Float32()*2 - 1
		c.V[i] = rng.Float32()*2 - 1
	}
	perm := rng.Perm(c.NumBlocks)
	bd := &benchDecode{
		cache: c, numHeads: s.numHeads, scale: float32(1 / math.Sqrt(float64(s.headDim))),
		q:       randomSlice(rng, s.batch*s.numHeads*s.headDim),
		out:     make([]float32, s.batch*s.numHeads*s.headDim),
		kvBytes: int64(2 * s.batch * s.ctx * s.kvHeads * s.headDim * 4),
	}
	for i := range s.batch {
		table := make([]int32, pages)
		for j := range table {
			table[j] = int32(perm[i*pages+j])
		}
		bd.tables = append(bd.tables, table)
		bd.lens = append(bd.lens, int32(s.ctx))
	}
	return bd
}
