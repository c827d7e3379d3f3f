package model

import (
	"math"
	"runtime"

	"github.com/gollm/gollm/internal/fanout"
)

// The matrix products of the CPU backend: dst[r][o] = Σ_i x[r][i] * w[o][i] for r < rows, o < out, with
// x [rows][in], w [out][in] (the Linear layout) and dst [rows][out], in float32 with eight partial sums
// per four dot products.
//
// Work is split by output features: each of up to workers goroutines takes a contiguous band of w's rows,
// so every weight is read from memory once per call however many token rows there are. A decode step
// (one row) is bound by reading the weights (about 4.5 GB/s on the 2-core machine this was tuned on),
// which is why bfloat16 checkpoints keep their weights in bfloat16: half the bytes for a shift per
// element. Within a band, four weight rows at a time meet every x row: x is loaded once per four dot
// products, and the four rows stay in L1 while the x rows stream past.

// quad is the number of weight rows a kernel call serves together.
const quad = 4

// defaultWorkers is the number of goroutines a CPU kernel splits its work across.
func defaultWorkers() int { return runtime.GOMAXPROCS(0) }

// parallelBands calls band on disjoint ranges [lo, hi) covering [0, out), cut at multiples of quad, from
// at most workers goroutines, and waits for them. The ranges are several per worker and claimed in turn,
// so a worker whose core is busy with something else takes fewer of them. Small problems (work below
// minParallelWork multiply-adds) run on the calling goroutine.
func parallelBands(out, work, workers int, band func(lo, hi int)) {
	const minParallelWork = 1 << 15
	const bandsPerWorker = 8
	numQuads := (out + quad - 1) / quad
	workers = min(workers, numQuads)
	if workers <= 1 || work < minParallelWork {
		band(0, out)
		return
	}
	numBands := min(numQuads, workers*bandsPerWorker)
	fanout.Each(workers, numBands, func(k int) {
		band(numQuads*k/numBands*quad, min(numQuads*(k+1)/numBands*quad, out))
	})
}

// matMul is the product with float32 weights.
func matMul(dst, x, w []float32, rows, in, out, workers int) {
	parallelBands(out, rows*in*out, workers, func(lo, hi int) {
		o := lo
		for ; o+quad <= hi; o += quad {
			w0, w1, w2, w3 := w[o*in:(o+1)*in], w[(o+1)*in:(o+2)*in], w[(o+2)*in:(o+3)*in], w[(o+3)*in:(o+4)*in]
			for r := range rows {
				s0, s1, s2, s3 := dot4(w0, w1, w2, w3, x[r*in:(r+1)*in])
				d := dst[r*out+o : r*out+o+quad]
				d[0], d[1], d[2], d[3] = s0, s1, s2, s3
			}
		}
		for ; o < hi; o++ {
			for r := range rows {
				dst[r*out+o] = dot(w[o*in:(o+1)*in], x[r*in:(r+1)*in])
			}
		}
	})
}

// bf16Matrix holds a bfloat16 matrix with an even number of columns as pairs: element 2j of a row is
// the low half of word j, element 2j+1 the high half (the little-endian file order), so one 32-bit load
// yields two weights and each widens with one shift or mask.
type bf16Matrix []uint32

// newBF16Matrix packs little-endian bfloat16 bytes (an even number of elements) into pairs.
func newBF16Matrix(data []byte) bf16Matrix {
	m := make(bf16Matrix, len(data)/4)
	for j := range m {
		m[j] = uint32(data[4*j]) | uint32(data[4*j+1])<<8 | uint32(data[4*j+2])<<16 | uint32(data[4*j+3])<<24
	}
	return m
}

// decodeBF16Pairs widens the pairs src into dst[:2*len(src)].
func decodeBF16Pairs(dst []float32, src []uint32) {
	dst = dst[:2*len(src)]
	for j, u := range src {
		dst[2*j] = math.Float32frombits(u << 16)
		dst[2*j+1] = math.Float32frombits(u & 0xffff0000)
	}
}

// matMulBF16 is the product with a bfloat16 weight matrix (in even). One or two token rows widen the
// weights inside the dot product; more rows widen four weight rows at a time into a float32 scratch once
// and reuse it for every row, so prefill pays the conversion once per weight.
func matMulBF16(dst, x []float32, w bf16Matrix, rows, in, out, workers int) {
	half := in / 2 // words per row
	parallelBands(out, rows*in*out, workers, func(lo, hi int) {
		var scratch []float32
		if rows > 2 {
			scratch = make([]float32, quad*in)
		}
		o := lo
		for ; o+quad <= hi; o += quad {
			if scratch == nil {
				w0, w1 := w[o*half:(o+1)*half], w[(o+1)*half:(o+2)*half]
				w2, w3 := w[(o+2)*half:(o+3)*half], w[(o+3)*half:(o+4)*half]
				for r := range rows {
					s0, s1, s2, s3 := dot4BF16(w0, w1, w2, w3, x[r*in:(r+1)*in])
					d := dst[r*out+o : r*out+o+quad]
					d[0], d[1], d[2], d[3] = s0, s1, s2, s3
				}
				continue
			}
			decodeBF16Pairs(scratch, w[o*half:(o+quad)*half])
			f0, f1, f2, f3 := scratch[:in], scratch[in:2*in], scratch[2*in:3*in], scratch[3*in:4*in]
			for r := range rows {
				s0, s1, s2, s3 := dot4(f0, f1, f2, f3, x[r*in:(r+1)*in])
				d := dst[r*out+o : r*out+o+quad]
				d[0], d[1], d[2], d[3] = s0, s1, s2, s3
			}
		}
		var row []float32
		for ; o < hi; o++ {
			if row == nil {
				row = make([]float32, in)
			}
			decodeBF16Pairs(row, w[o*half:(o+1)*half])
			for r := range rows {
				dst[r*out+o] = dot(row, x[r*in:(r+1)*in])
			}
		}
	})
}

// dot4 returns the dot products of x with w0..w3 (each at least len(x) long). Each step takes two
// elements of every row and adds their pair sum to the row's accumulator: four accumulators, two x
// values and the products fit the 16 SSE registers without spills.
func dot4(w0, w1, w2, w3, x []float32) (float32, float32, float32, float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	var a0, a1, a2, a3 float32
	for i := 1; i < n; i += 2 { // the index pattern lets the compiler drop the weights' bounds checks
		x0, x1 := x[i-1], x[i]
		a0 += w0[i-1]*x0 + w0[i]*x1
		a1 += w1[i-1]*x0 + w1[i]*x1
		a2 += w2[i-1]*x0 + w2[i]*x1
		a3 += w3[i-1]*x0 + w3[i]*x1
	}
	if n%2 == 1 {
		x0 := x[n-1]
		a0 += w0[n-1] * x0
		a1 += w1[n-1] * x0
		a2 += w2[n-1] * x0
		a3 += w3[n-1] * x0
	}
	return a0, a1, a2, a3
}

// dot4BF16 is dot4 with bfloat16 weight pairs (each at least len(x)/2 words; len(x) even), widened as
// they are loaded: the low half of a word shifted up, the high half masked. It runs as two passes of two
// rows, because four rows' words and widened values do not fit the general registers.
func dot4BF16(w0, w1, w2, w3 []uint32, x []float32) (float32, float32, float32, float32) {
	a0, a1 := dot2BF16(w0, w1, x)
	a2, a3 := dot2BF16(w2, w3, x)
	return a0, a1, a2, a3
}

// dot2BF16 returns the dot products of x with the bfloat16 pair rows w0 and w1.
func dot2BF16(w0, w1 []uint32, x []float32) (float32, float32) {
	n := len(x) / 2
	w0, w1 = w0[:n], w1[:n]
	x = x[:2*n]
	var a0, a1 float32
	for j := range n {
		x0, x1 := x[2*j], x[2*j+1]
		u, v := w0[j], w1[j]
		a0 += math.Float32frombits(u<<16)*x0 + math.Float32frombits(u&0xffff0000)*x1
		a1 += math.Float32frombits(v<<16)*x0 + math.Float32frombits(v&0xffff0000)*x1
	}
	return a0, a1
}

// dot returns the dot product of w (at least len(x) long) and x, with four partial sums.
func dot(w, x []float32) float32 {
	n := len(x)
	w = w[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+3 < n; i += 4 {
		s0 += w[i] * x[i]
		s1 += w[i+1] * x[i+1]
		s2 += w[i+2] * x[i+2]
		s3 += w[i+3] * x[i+3]
	}
	for ; i < n; i++ {
		s0 += w[i] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}
