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
