//go:build cuda

package cuda

import (
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
	d := openDevice(t)
	if info := d.Info(); info.Major*10+info.Minor < 89 {
		t.Skipf("%s (%d.%d) has no FP8 tensor cores", info.Name, info.Major, info.Minor)
	}
	blas, err := d.LoadBLAS()
	if err != nil {
		t.Fatal(err)
	}
	defer blas.Destroy()
	lt, err := d.LoadBLASLt(blas)
	gputest.Require(t, err)
	defer lt.Destroy()
	path, version := lt.Library()
	t.Logf("cuBLASLt %s version %d", path, version)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	rng := rand.New(rand.NewPCG(8, 9))
	for _, sh := range []struct{ m, n, k int }{{65, 96, 256}, {200, 48, 64}, {1024, 512, 1024}, {1024, 512, 1024}} {
		m, n, k := sh.m, sh.n, sh.k
		x, w := make([]byte, m*k), make([]byte, n*k)
		for i := range x {
			x[i] = byte(rng.IntN(0x7F)) | byte(rng.IntN(2))<<7
		}
		for i := range w {
			w[i] = byte(rng.IntN(0x7F)) | byte(rng.IntN(2))<<7
		}
		xd, wd, yd := allocBytes(t, d, x), allocBytes(t, d, w), allocFloats(t, d, m*n)
		if err := d.Fill32(yd, 0x7fc00000, int64(m*n), nil); err != nil {
			t.Fatal(err)
		}
		if err := d.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := lt.MatmulE4M3(n, m, k, wd, k, xd, k, yd, n, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := download(t, d, yd, m*n)
		for i := range m {
			for j := range n {
				var ref, abs float64
				for l := range k {
					p := float64(dtype.E4M3ToF32(x[i*k+l])) * float64(dtype.E4M3ToF32(w[j*k+l]))
					ref += p
					abs += math.Abs(p)
				}
				if g := float64(got[i*n+j]); !(math.Abs(g-ref) <= abs*LtE4M3Tolerance) {
					t.Fatalf("%v: Y[%d][%d] = %v, want %v (Σ|p| %v)", sh, i, j, g, ref, abs)
				}
			}
		}
	}
}

func allocBytes(t *testing.T, d *Device, b []byte) DevicePtr {
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
