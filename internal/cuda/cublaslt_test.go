//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/internal/gputest"
)

// TestMatmulE4M3 checks cuBLASLt's FP8 product (on compute capability 8.9 or newer) against the float64
// sum of the products of the e4m3 values: Y[m][n] = X[m][k]·W[n][k]ᵀ over random finite codes, and a
// shape run twice (the kept plan). Each element is within LtE4M3Tolerance·Σ|products| of the sum
// (LtE4M3Tolerance gives the mechanism). A transposed or misplaced operand sums other products: its error
// is of the size of the element itself, about Σ|p|/√k for products of random sign (1/32 of Σ|p| at
// k = 1024), eight times the tolerance or more, and every element is checked.
func TestMatmulE4M3(t *testing.T) {
	d, _, lt := openLt(t)
	path, version := lt.Library()
	t.Logf("cuBLASLt %s version %d", path, version)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	rng := rand.New(rand.NewPCG(8, 9))
	for _, sh := range []struct{ m, n, k int }{{65, 96, 256}, {200, 48, 64}, {1024, 512, 1024}, {1024, 512, 1024}} {
		newE4M3Case(t, d, rng, sh.m, sh.n, sh.k).run(t, d, lt, s, fmt.Sprint(sh))
	}
}

// TestMatmulE4M3Candidates runs an e4m3 product of decode rows (64 tokens, which tune times) on every
// algorithm cuBLASLt's heuristic offers for it, each checked as TestMatmulE4M3 checks: tune may keep any
// of them for the process, so each must compute the product.
func TestMatmulE4M3Candidates(t *testing.T) {
	d, _, lt := openLt(t)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const m, n, k = 64, 1024, 2048
	c := newE4M3Case(t, d, rand.New(rand.NewPCG(10, 11)), m, n, k)
	c.run(t, d, lt, s, "tuned") // the plan's first call, which tunes it
	ran := 0
	for i := range 8 {
		if lt.candidate(n, m, k, k, k, n, i) {
			c.run(t, d, lt, s, fmt.Sprintf("candidate %d", i))
			ran++
		}
	}
	if lt.tuned != 1 || ran < 2 {
		t.Fatalf("%d plans tuned, %d candidates run: want 1 tuned and several candidates", lt.tuned, ran)
	}
	t.Logf("%d candidates; the tuned plan left the heuristic's first: %v", ran, lt.retuned == 1)
}

// TestMatmulE4M3CaptureSkipsTuning: a plan of decode rows first called while its stream is captured
// into a graph does not time its candidates (a timing would run inside the capture, and its event
// waits would fail it); the captured product, replayed, is right; a new plan of decode rows called
// eagerly after the capture times them.
func TestMatmulE4M3CaptureSkipsTuning(t *testing.T) {
	d, _, lt := openLt(t)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	rng := rand.New(rand.NewPCG(12, 13))
	c := newE4M3Case(t, d, rng, 64, 1024, 2048)
	c.poison(t, d)
	if err := s.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	runErr := lt.MatmulE4M3(c.n, c.m, c.k, c.wd, c.k, c.xd, c.k, c.yd, c.n, s)
	g, err := s.EndCapture()
	if runErr != nil || err != nil {
		t.Fatalf("product under capture: %v; capture: %v", runErr, err)
	}
	defer g.Destroy()
	if lt.tuned != 0 {
		t.Fatalf("%d plans tuned during a capture", lt.tuned)
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Destroy()
	if err := exec.Launch(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	checkE4M3(t, "captured", download(t, d, c.yd, c.m*c.n), c.x, c.w, c.m, c.n, c.k)
	newE4M3Case(t, d, rng, 32, 1024, 2048).run(t, d, lt, s, "eager")
	if lt.tuned != 1 {
		t.Fatalf("%d plans tuned after an eager call of new decode rows, want 1", lt.tuned)
	}
}

// e4m3Case is a product Y[m][n] = X[m][k]·W[n][k]ᵀ of random finite e4m3 codes, on the host and the device.
type e4m3Case struct {
	m, n, k    int
	x, w       []byte
	xd, wd, yd DevicePtr
}

func newE4M3Case(t *testing.T, d *Device, rng *rand.Rand, m, n, k int) *e4m3Case {
	c := &e4m3Case{m: m, n: n, k: k, x: make([]byte, m*k), w: make([]byte, n*k)}
	for _, b := range [][]byte{c.x, c.w} {
		for i := range b {
			b[i] = byte(rng.IntN(0x7F)) | byte(rng.IntN(2))<<7
		}
	}
	c.xd, c.wd, c.yd = allocBytes(t, d, c.x), allocBytes(t, d, c.w), allocFloats(t, d, m*n)
	return c
}

// run fills Y with NaN, queues lt's product on s (in cuBLAS's terms, Yᵀ = W·Xᵀ) and checks it (checkE4M3).
func (c *e4m3Case) run(t *testing.T, d *Device, lt *BLASLt, s *Stream, name string) {
	t.Helper()
	m, n, k := c.m, c.n, c.k
	c.poison(t, d)
	if err := lt.MatmulE4M3(n, m, k, c.wd, k, c.xd, k, c.yd, n, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	checkE4M3(t, name, download(t, d, c.yd, m*n), c.x, c.w, m, n, k)
}

// poison fills Y with NaN and waits, so that an element the product does not write fails checkE4M3.
func (c *e4m3Case) poison(t *testing.T, d *Device) {
	t.Helper()
	if err := d.Fill32(c.yd, 0x7fc00000, int64(c.m*c.n), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// checkE4M3 checks got (Y[m][n] of an e4m3 product) against the float64 sums of X[m][k]·W[n][k]ᵀ's
// products, each element within LtE4M3Tolerance·Σ|products|.
func checkE4M3(t *testing.T, name string, got []float32, x, w []byte, m, n, k int) {
	t.Helper()
	for i := range m {
		for j := range n {
			var ref, abs float64
			for l := range k {
				p := float64(dtype.E4M3ToF32(x[i*k+l])) * float64(dtype.E4M3ToF32(w[j*k+l]))
				ref += p
				abs += math.Abs(p)
			}
			if g := float64(got[i*n+j]); !(math.Abs(g-ref) <= abs*LtE4M3Tolerance) {
				t.Fatalf("%s: Y[%d][%d] = %v, want %v (Σ|p| %v)", name, i, j, g, ref, abs)
			}
		}
	}
}

// openLt opens the GPU, cuBLAS and cuBLASLt for an FP8 test (skipped below compute capability 8.9),
// released when t ends.
func openLt(t testing.TB) (*Device, *BLAS, *BLASLt) {
	t.Helper()
	d := openDevice(t)
	if info := d.Info(); info.Major*10+info.Minor < 89 {
		t.Skipf("%s (%d.%d) has no FP8 tensor cores", info.Name, info.Major, info.Minor)
	}
	blas, err := d.LoadBLAS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blas.Destroy() })
	lt, err := d.LoadBLASLt(blas)
	gputest.Require(t, err)
	t.Cleanup(func() { lt.Destroy() })
	return d, blas, lt
}

func allocBytes(t testing.TB, d *Device, b []byte) DevicePtr {
	t.Helper()
	p, err := d.Alloc(int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	if err := d.CopyToDevice(p, b); err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkLtE4M3Forms times cuBLASLt's e4m3 GEMM on random operands in each form (ltForm: float32 or bfloat16 output, fast
// accumulation or not) with and without outer-vector scales, at Llama-3-8B's products (Y[m][n] =
// X[m][k]·W[n][k]ᵀ) at 64 and 1024 rows, beside cuBLAS's bfloat16 GemmEx of the same shape with a
// float32 output (what a bf16 model's prefill runs): us, TFLOP/s and bf16/fp8. A form the library
// refuses reports refused=1 and no time.
//
//	go test -tags cuda -run XXX -bench LtE4M3Forms -benchtime 1x ./internal/cuda
func BenchmarkLtE4M3Forms(bb *testing.B) {
	d, blas, lt := openLt(bb)
	timer, err := d.NewTimer(20, 3, 20_000)
	if err != nil {
		bb.Fatal(err)
	}
	defer timer.Close()
	alloc := func(n int64) DevicePtr {
		p, err := d.Alloc(n)
		if err != nil {
			bb.Fatal(err)
		}
		bb.Cleanup(func() { d.Free(p) })
		return p
	}
	const maxM = 1024
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []struct {
		name string
		n, k int
	}{{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gateup", 28672, 4096}, {"down", 4096, 14336}} {
		w, x := alloc(int64(sh.n*sh.k)), alloc(int64(maxM*sh.k))
		w16, x16 := alloc(int64(2*sh.n*sh.k)), alloc(int64(2*maxM*sh.k))
		y := alloc(int64(4 * maxM * sh.n))
		sa, sb := alloc(int64(4*sh.n)), alloc(int64(4*maxM))
		// Random operands, as a model's: the tensor cores' power, and with it the clock, depends on the data.
		for _, p := range []struct {
			ptr  DevicePtr
			n    int
			bf16 bool
		}{{w, sh.n * sh.k, false}, {x, maxM * sh.k, false}, {w16, sh.n * sh.k, true}, {x16, maxM * sh.k, true}} {
			b := make([]byte, p.n)
			if p.bf16 {
				b = make([]byte, 2*p.n)
				for i := range p.n {
					h := math.Float32bits(float32(rng.NormFloat64())) >> 16
					b[2*i], b[2*i+1] = byte(h), byte(h>>8)
				}
			} else {
				for i := range b {
					b[i] = byte(rng.IntN(256)) & 0xbf // finite, moderate
				}
			}
			if err := d.CopyToDevice(p.ptr, b); err != nil {
				bb.Fatal(err)
			}
		}
		for _, p := range []struct {
			ptr DevicePtr
			n   int64
		}{{sa, int64(sh.n)}, {sb, maxM}} {
			if err := d.Fill32(p.ptr, math.Float32bits(1), p.n, nil); err != nil {
				bb.Fatal(err)
			}
		}
		for _, m := range []int{64, maxM} {
			flops := 2 * float64(m) * float64(sh.n) * float64(sh.k)
			bf16, err := timer.Median(1, func(int) error {
				return blas.GemmEx(Trans, NoTrans, sh.n, m, sh.k, 1, w16, BFloat16, sh.k, x16, BFloat16, sh.k, 0, y, Float32, sh.n)
			})
			if err != nil {
				bb.Fatal(err)
			}
			for _, form := range []ltForm{{}, {fast: true}, {out16: true}, {out16: true, fast: true}} {
				for _, scaled := range []bool{false, true} {
					var psa, psb DevicePtr
					if scaled {
						psa, psb = sa, sb
					}
					name := fmt.Sprintf("%s-%dx%d/m=%d/out16=%v/fast=%v/scaled=%v", sh.name, sh.n, sh.k, m, form.out16, form.fast, scaled)
					bb.Run(name, func(bb *testing.B) {
						run := func(int) error {
							return lt.matmulE4M3Form(form, sh.n, m, sh.k, w, sh.k, x, sh.k, y, sh.n, psa, psb, nil)
						}
						if err := run(0); err != nil {
							bb.Logf("refused: %v", err)
							bb.ReportMetric(1, "refused")
							return
						}
						var us float64
						for bb.Loop() {
							if us, err = timer.Median(1, run); err != nil {
								bb.Fatal(err)
							}
						}
						bb.ReportMetric(us, "us")
						bb.ReportMetric(flops/(us*1e-6)/1e12, "TFLOP/s")
						bb.ReportMetric(bf16, "bf16-us")
						bb.ReportMetric(bf16/us, "bf16/fp8")
					})
				}
			}
		}
	}
}

// BenchmarkLtE4M3Candidates times every algorithm cuBLASLt's heuristic offers for Llama-3-8B's FP8
// products (float32 out, unscaled) at decode and prefill row counts: us of the heuristic's first
// (first_us), of each candidate (c<i>_us) and of the fastest (best_us), and first/best, which is what
// tune gains where it runs (16-256 rows). The table of docs/bench/fp8-h200.md ("cuBLASLt's candidates
// timed").
//
//	go test -tags cuda -run XXX -bench LtE4M3Candidates -benchtime 1x ./internal/cuda
func BenchmarkLtE4M3Candidates(bb *testing.B) {
	d, _, lt := openLt(bb)
	timer, err := d.NewTimer(30, 5, 20_000)
	if err != nil {
		bb.Fatal(err)
	}
	defer timer.Close()
	lt.TuneRows = func(int) bool { return false } // every plan keeps the heuristic's first until asked
	const maxM = 8192
	rng := rand.New(rand.NewPCG(5, 6))
	alloc := func(n int) DevicePtr {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256)) & 0xbf // finite, moderate
		}
		return allocBytes(bb, d, b)
	}
	for _, sh := range []struct {
		name string
		n, k int
	}{{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gateup", 28672, 4096}, {"down", 4096, 14336}} {
		w, x := alloc(sh.n*sh.k), alloc(maxM*sh.k)
		y := allocFloats(bb, d, maxM*sh.n)
		for _, m := range []int{16, 32, 64, 128, 256, 1024, 2048, maxM} {
			run := func(int) error { return lt.MatmulE4M3(sh.n, m, sh.k, w, sh.k, x, sh.k, y, sh.n, nil) }
			if err := run(0); err != nil { // the plan, on the heuristic's first
				bb.Fatal(err)
			}
			bb.Run(fmt.Sprintf("%s/m=%d", sh.name, m), func(b *testing.B) {
				first, best := 0.0, math.Inf(1)
				for c := range 8 {
					if !lt.candidate(sh.n, m, sh.k, sh.k, sh.k, sh.n, c) {
						continue
					}
					us, err := timer.Median(1, run)
					if err != nil {
						b.Fatal(err)
					}
					if c == 0 {
						first = us
					}
					best = min(best, us)
					b.ReportMetric(us, fmt.Sprintf("c%d_us", c))
				}
				b.ReportMetric(first, "first_us")
				b.ReportMetric(best, "best_us")
				b.ReportMetric(first/best, "first/best")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
