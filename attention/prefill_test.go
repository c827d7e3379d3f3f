package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttendPrefill reports query tokens per second of a prefill chunk through Attend.
func BenchmarkAttendPrefill(b *testing.B) {
	for _, s := range []struct {
		name                        string
		qlen, ctx, hq, hkv, headDim int
	}{
		{"smollm2_prompt512", 512, 512, 9, 3, 64},
		{"llama3_chunk256_after1024", 256, 1280, 32, 8, 128},
	} {
		b.Run(fmt.Sprintf("%s_hq%d_hkv%d_d%d", s.name, s.hq, s.hkv, s.headDim), func(b *testing.B) {
			const blockSize = 16
			rng := rand.New(rand.NewPCG(2, 2))
			pages := ceilDiv(s.ctx, blockSize)
			c := NewCache(pages, blockSize, s.hkv, s.headDim)
			for i := range c.K {
				c.K[i] = rng.Float32()*2 - 1
				c.V[i] = rng.Float32()*2 - 1
			}
			table := make([]int32, pages)
			for i, p := range rng.Perm(pages) {
				table[i] = int32(p)
			}
			batch := &Batch{QueryStart: []int32{0, int32(s.qlen)}, ContextLens: []int32{int32(s.ctx)}, BlockTables: [][]int32{table}}
			q := randomSlice(rng, s.qlen*s.hq*s.headDim)
			out := make([]float32, len(q))
			scale := float32(1 / math.Sqrt(float64(s.headDim)))
			for b.Loop() {
				Attend(out, q, s.hq, scale, c, batch)
			}
			b.ReportMetric(float64(s.qlen)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkAttendWindow measures Mistral-7B-v0.1's attention (32 query heads over 8 KV heads of 128,
// window 4096) through Attend: one decode at context 4096 and at 16384 (the same 4096 keys read: the
// times should match), and a 256-token prefill chunk after 4096 and after 16384 cached tokens (the
// second skips the tiles behind the window).
func BenchmarkAttendWindow(b *testing.B) {
	const blockSize, hq, hkv, d, window = 16, 32, 8, 128, 4096
	for _, s := range []struct {
		name      string
		qlen, ctx int
	}{
		{"decode_ctx4096", 1, 4096},
		{"decode_ctx16384", 1, 16384},
		{"prefill256_ctx4352", 256, 4352},
		{"prefill256_ctx16640", 256, 16640},
	} {
		b.Run(s.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 3))
			pages := ceilDiv(s.ctx, blockSize)
			c := NewCache(pages, blockSize, hkv, d)
			for i := range c.K {
				c.K[i] = rng.Float32()*2 - 1
				c.V[i] = rng.Float32()*2 - 1
			}
			table := make([]int32, pages)
			for i, p := range rng.Perm(pages) {
				table[i] = int32(p)
			}
			batch := &Batch{QueryStart: []int32{0, int32(s.qlen)}, ContextLens: []int32{int32(s.ctx)},
				BlockTables: [][]int32{table}, Window: window}
			q := randomSlice(rng, s.qlen*hq*d)
			out := make([]float32, len(q))
			for b.Loop() {
				Attend(out, q, hq, 1/float32(math.Sqrt(d)), c, batch)
			}
			b.ReportMetric(float64(s.qlen)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestSM90Pages pins the page sizes the Hopper prefill kernels are launched with: what their producer's
// switch instantiates (8, 16, 32, 64 tokens); every other size goes to the mma.sync kernels.
func TestSM90Pages(t *testing.T) {
	for bs := -1; bs <= 300; bs++ {
		want := bs == 8 || bs == 16 || bs == 32 || bs == 64
		if got := sm90Pages(bs); got != want {
			t.Errorf("sm90Pages(%d) = %v, want %v", bs, got, want)
		}
	}
}

// TestPrefillItemsBefore: over PrefillItems' layout of decodes (one row each) then prefill chunks,
// PrefillItemsBefore(items, d) is the decodes' items, ⌈group / heads per item⌉ each (two from 65 heads a
// group), and the item there is sequence d's first; past the last sequence it is every item.
func TestPrefillItemsBefore(t *testing.T) {
	for _, tc := range []struct {
		group, vectors, decodes int
		chunks                  []int32
	}{
		{4, PrefillSM90Vectors, 0, []int32{1024}},
		{4, PrefillSM90Vectors, 254, []int32{1024, 1024}},
		{4, prefillVectors, 3, []int32{7}},
		{1, prefillVectors, 40, []int32{65, 1}},
		{7, PrefillSM90Vectors, 12, []int32{50, 40}},
		{128, prefillVectors, 5, []int32{3}},
		{65, PrefillSM90Vectors, 2, []int32{9, 300}},
	} {
		t.Run(fmt.Sprintf("g%d_v%d_d%d", tc.group, tc.vectors, tc.decodes), func(t *testing.T) {
			starts := []int32{0}
			for range tc.decodes {
				starts = append(starts, starts[len(starts)-1]+1)
			}
			for _, c := range tc.chunks {
				starts = append(starts, starts[len(starts)-1]+c)
			}
			items := PrefillItems(nil, starts, tc.group, tc.vectors)
			per := (tc.group + PrefillHeadsPerItem(tc.group) - 1) / PrefillHeadsPerItem(tc.group)
			n := PrefillItemsBefore(items, int32(tc.decodes))
			if n != tc.decodes*per {
				t.Fatalf("%d items before sequence %d, want %d (%d a decode)", n, tc.decodes, tc.decodes*per, per)
			}
			if items[4*n] != int32(tc.decodes) || items[4*n+1] != int32(tc.decodes) {
				t.Errorf("item %d: sequence %d, first row %d; want sequence %d's first", n, items[4*n], items[4*n+1], tc.decodes)
			}
			if all := PrefillItemsBefore(items, int32(len(starts))); all != len(items)/4 {
				t.Errorf("%d items before the end, want all %d", all, len(items)/4)
			}
		})
	}
}
