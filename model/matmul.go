package model

import "sync"

// matMul computes dst[r][o] = Σ_i x[r][i] * w[o][i] for r < rows, o < out, with x [rows][in], w [out][in]
// and dst [rows][out], in float32 with eight partial sums per dot product.
//
// Work is split by output features: each of up to workers goroutines takes a contiguous band of w's rows,
// so every weight is read from memory once per call however many token rows there are (the decode step
// is bound by reading the weights). Within a band, four weight rows at a time meet every x row: a weight
// row is loaded once per four dot products' worth of x loads, and the four rows (16 KB at in = 1024) stay
// in L1 while the x rows stream past.
func matMul(dst, x, w []float32, rows, in, out, workers int) {
	const quad = 4
	numQuads := (out + quad - 1) / quad
	if workers > numQuads {
		workers = numQuads
	}
	// Below this much work a goroutine costs more than it saves.
	if workers < 1 || rows*in*out < 1<<15 {
		workers = 1
	}
	band := func(lo, hi int) { // output features [lo, hi)
		o := lo
		for ; o+quad <= hi; o += quad {
			w0 := w[o*in : (o+1)*in]
			w1 := w[(o+1)*in : (o+2)*in]
			w2 := w[(o+2)*in : (o+3)*in]
			w3 := w[(o+3)*in : (o+4)*in]
			for r := range rows {
				s0, s1, s2, s3 := dot4(w0, w1, w2, w3, x[r*in:(r+1)*in])
				d := dst[r*out+o : r*out+o+quad]
				d[0], d[1], d[2], d[3] = s0, s1, s2, s3
			}
		}
		for ; o < hi; o++ {
			wo := w[o*in : (o+1)*in]
			for r := range rows {
				dst[r*out+o] = dot(wo, x[r*in:(r+1)*in])
			}
		}
	}
	if workers == 1 {
		band(0, out)
		return
	}
	var wg sync.WaitGroup
	for k := range workers {
		lo := numQuads * k / workers * quad
		hi := min(numQuads*(k+1)/workers*quad, out)
		wg.Go(func() { band(lo, hi) })
	}
	wg.Wait()
}

// dot4 returns the dot products of x with w0..w3 (each at least len(x) long), two partial sums each.
func dot4(w0, w1, w2, w3, x []float32) (float32, float32, float32, float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	i := 0
	for ; i+1 < n; i += 2 {
		x0, x1 := x[i], x[i+1]
		a0 += w0[i] * x0
		b0 += w0[i+1] * x1
		a1 += w1[i] * x0
		b1 += w1[i+1] * x1
		a2 += w2[i] * x0
		b2 += w2[i+1] * x1
		a3 += w3[i] * x0
		b3 += w3[i+1] * x1
	}
	if i < n {
		x0 := x[i]
		a0 += w0[i] * x0
		a1 += w1[i] * x0
		a2 += w2[i] * x0
		a3 += w3[i] * x0
	}
	return a0 + b0, a1 + b1, a2 + b2, a3 + b3
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
