package attention

import (
	"math"

	"github.com/gollm/gollm/internal/dtype"
)

// walker is one worker's state for the page walk that every kernel here shares: a tile of query vectors
// (the G heads of one KV group for decode; rows × G for a prefill tile), the scores of those vectors
// against one page of keys, and the online-softmax state (m, l, acc) of each vector, all float32. On the
// GPU the query tile and (m, l, acc) live in registers and the page's K/V tile in shared memory; here they
// are small per-worker buffers that stay in L1/L2.
//
// The walk reads each K and V row of the KV head once per tile and uses it for every vector of the tile:
// that is the property that makes the grouped kernel read the cache once per KV head, not once per query
// head.
type walker struct {
	headDim, blockSize int
	q                  []float32 // [vectors][headDim], queries pre-multiplied by scale
	scores             []float32 // [vectors][blockSize], scores, then probabilities, of the current page
	m, l               []float32 // [vectors] running max and running sum of exp(score - m)
	acc                []float32 // [vectors][headDim] running Σ exp(score - m) · v
	lower, limit       []int     // [vectors] first and exclusive last key a vector may see (window, causal mask)
	page               []float32 // [blockSize][headDim]: an FP8 cache's K, then V, rows of the current page, dequantized
	sink               float32   // keeps prefetch's loads alive; never read
}

func newWalker(maxVectors, headDim, blockSize int) *walker {
	return &walker{
		headDim:   headDim,
		blockSize: blockSize,
		q:         make([]float32, maxVectors*headDim),
		scores:    make([]float32, maxVectors*blockSize),
		m:         make([]float32, maxVectors),
		l:         make([]float32, maxVectors),
		acc:       make([]float32, maxVectors*headDim),
		lower:     make([]int, maxVectors),
		limit:     make([]int, maxVectors),
		page:      make([]float32, blockSize*headDim),
	}
}

// loadQ copies n query vectors starting at src into the tile from vector index first, multiplied by scale.
func (w *walker) loadQ(first int, src []float32, n int, scale float32) {
	d := w.headDim
	dst := w.q[first*d : (first+n)*d]
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = x * scale
	}
}

// walk runs online softmax for vectors [0, n) of the tile over the keys [keyStart, keyEnd) of KV head head,
// read through the block table. With masked, vector r sees only keys in [w.lower[r], w.limit[r]); every
// vector must see at least one key (true of causal attention, which sees its own position), or its l
// stays 0. It leaves (m, l, acc) per vector.
func (w *walker) walk(c *Cache, head int, table []int32, n, keyStart, keyEnd int, masked bool) {
	d, bs := w.headDim, w.blockSize
	stride := c.NumKVHeads * d
	m, l := w.m[:n], w.l[:n]
	acc := w.acc[:n*d]
	for r := range m {
		m[r] = float32(math.Inf(-1))
		l[r] = 0
	}
	clear(acc)
	for t := keyStart; t < keyEnd; {
		block, off := int(table[t/bs]), t%bs
		tile := min(bs-off, keyEnd-t)
		base := ((block*bs+off)*c.NumKVHeads + head) * d
		if next := t + tile; next < keyEnd {
			w.prefetch(c, head, int(table[next/bs]), next%bs, min(bs-next%bs, keyEnd-next))
		}

		// Scores: each K row is loaded once and dotted with every vector of the tile.
		keys, keyStride := w.rows(c.K, c.K8, c.KScale, base, stride, tile)
		for j := range tile {
			w.scoreRow(keys[j*keyStride:j*keyStride+d], n, j)
		}

		// Online softmax per vector: new max, rescale of the old state, probabilities of this page.
		for r := range n {
			s := w.scores[r*bs : r*bs+tile]
			from, valid := 0, tile
			if masked {
				from, valid = max(0, w.lower[r]-t), min(tile, w.limit[r]-t)
			}
			if valid <= from {
				clear(s)
				continue
			}
			mx := s[from]
			for _, x := range s[from+1 : valid] {
				mx = max(mx, x)
			}
			mNew := max(m[r], mx)
			corr := expf(m[r] - mNew)
			var sum float32
			for j := from; j < valid; j++ {
				p := expf(s[j] - mNew)
				s[j] = p
				sum += p
			}
			clear(s[:from])
			clear(s[valid:])
			l[r] = l[r]*corr + sum
			m[r] = mNew
			if corr != 1 {
				a := acc[r*d : (r+1)*d]
				for i := range a {
					a[i] *= corr
				}
			}
		}

		// P·V: each V row is loaded once and accumulated into every vector of the tile.
		values, valueStride := w.rows(c.V, c.V8, c.VScale, base, stride, tile)
		for j := range tile {
			w.accumulateRow(values[j*valueStride:j*valueStride+d], n, j)
		}
		t += tile
	}
}

// rows returns the tile rows of one KV head of the current page, starting at element base of the pool
// and stride elements apart, as float32 rows stride apart: the float32 pool itself, or for an FP8
// pool (f32 nil) the rows of codes dequantized into w.page, each element float32(e4m3) · scale, the
// rows headDim apart. On the GPU that dequantization happens in registers as the tile is loaded.
func (w *walker) rows(f32 []float32, codes []uint8, scale float32, base, stride, tile int) ([]float32, int) {
	if f32 != nil {
		return f32[base:], stride
	}
	d := w.headDim
	for j := range tile {
		dtype.DecodeE4M3(w.page[j*d:(j+1)*d], codes[base+j*stride:base+j*stride+d], scale)
	}
	return w.page, d
}

// prefetch touches one value per cache line of the K and V rows of the next page (tokens [off,
// off+n) of block, KV head head) before the current page is computed. Rows of one KV head are
// NumKVHeads·HeadDim·4 bytes apart, usually a 4 KiB page or more, where the hardware prefetcher does not
// follow; touching them all at once lets their cache misses overlap instead of stalling the dot products
// one row at a time. It is the CPU's version of the GPU kernel's next-tile load in flight.
func (w *walker) prefetch(c *Cache, head, block, off, n int) {
	const floatsPerLine = 64 / 4
	d := w.headDim
	stride := c.NumKVHeads * d
	base := ((block*w.blockSize+off)*c.NumKVHeads + head) * d
	if c.FP8() {
		var s uint8
		for j := range n {
			k := c.K8[base+j*stride : base+j*stride+d]
			v := c.V8[base+j*stride : base+j*stride+d]
			for i := 0; i < d; i += 64 {
				s += k[i] ^ v[i]
			}
		}
		w.sink += float32(s)
		return
	}
	var s0, s1 float32
	for j := range n {
		k := c.K[base+j*stride : base+j*stride+d]
		v := c.V[base+j*stride : base+j*stride+d]
		for i := 0; i < d; i += floatsPerLine {
			s0 += k[i]
			s1 += v[i]
		}
	}
	w.sink += s0 + s1
}

// scoreRow sets scores[r][j] = q[r]·k for r in [0, n), four vectors at a time so that each element of k
// is loaded once per four dot products.
func (w *walker) scoreRow(k []float32, n, j int) {
	d, bs := w.headDim, w.blockSize
	r := 0
	for ; r+4 <= n; r += 4 {
		s0, s1, s2, s3 := dot4(w.q[r*d:(r+1)*d], w.q[(r+1)*d:(r+2)*d], w.q[(r+2)*d:(r+3)*d], w.q[(r+3)*d:(r+4)*d], k)
		w.scores[r*bs+j] = s0
		w.scores[(r+1)*bs+j] = s1
		w.scores[(r+2)*bs+j] = s2
		w.scores[(r+3)*bs+j] = s3
	}
	for ; r < n; r++ {
		w.scores[r*bs+j] = dot(w.q[r*d:(r+1)*d], k)
	}
}

// accumulateRow adds scores[r][j]·v to acc[r] for r in [0, n), four vectors at a time.
func (w *walker) accumulateRow(v []float32, n, j int) {
	d, bs := w.headDim, w.blockSize
	r := 0
	for ; r+4 <= n; r += 4 {
		axpy4(w.acc[r*d:(r+1)*d], w.acc[(r+1)*d:(r+2)*d], w.acc[(r+2)*d:(r+3)*d], w.acc[(r+3)*d:(r+4)*d],
			w.scores[r*bs+j], w.scores[(r+1)*bs+j], w.scores[(r+2)*bs+j], w.scores[(r+3)*bs+j], v)
	}
	for ; r < n; r++ {
		axpy(w.acc[r*d:(r+1)*d], w.scores[r*bs+j], v)
	}
}

// store writes acc[r]/l[r] for vectors [first, first+n) to dst (n consecutive rows of headDim).
func (w *walker) store(dst []float32, first, n int) {
	d := w.headDim
	for r := first; r < first+n; r++ {
		inv := 1 / w.l[r]
		o := dst[(r-first)*d : (r-first+1)*d]
		a := w.acc[r*d : (r+1)*d]
		a = a[:len(o)]
		for i := range o {
			o[i] = a[i] * inv
		}
	}
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dot4(q0, q1, q2, q3, k []float32) (s0, s1, s2, s3 float32) {
	q0, q1, q2, q3 = q0[:len(k)], q1[:len(k)], q2[:len(k)], q3[:len(k)]
	for i, x := range k {
		s0 += q0[i] * x
		s1 += q1[i] * x
		s2 += q2[i] * x
		s3 += q3[i] * x
	}
	return
}

func axpy(dst []float32, a float32, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += a * x[i]
	}
}

func axpy4(d0, d1, d2, d3 []float32, a0, a1, a2, a3 float32, x []float32) {
	d0, d1, d2, d3 = d0[:len(x)], d1[:len(x)], d2[:len(x)], d3[:len(x)]
	for i, v := range x {
		d0[i] += a0 * v
		d1[i] += a1 * v
		d2[i] += a2 * v
		d3[i] += a3 * v
	}
}

// expf is exp for the softmax's arguments (x ≤ 0, -Inf allowed).
func expf(x float32) float32 {
	return float32(math.Exp(float64(x)))
}
