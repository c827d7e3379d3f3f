//go:build cuda

package cuda

import (
	"strings"
	"testing"
)

// TestEncodeTiled checks the tensor-map encoder: bfloat16 and float16 matrices with 128-byte rows in the
// box (and a box taller than what is left of the matrix, which the copy engine zero-fills) and the 4-D
// map of interleaved gate and up rows (strides that do not nest) encode; boxes the 128-byte swizzle cannot
// serve, empty boxes or dimensions, misaligned or oversized strides, misaligned bases, ranks out of 2 … 5
// and other dtypes are refused with an error. Unswizzled (EncodeTiledLinear) boxes take rows of any
// multiple of 16 bytes up to 256 elements. (The copies themselves are checked by package model's GEMM
// tests and package attention's FP8 prefill tests.)
func TestEncodeTiled(t *testing.T) {
	dev := openDevice(t)
	base, err := dev.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(base)
	for _, c := range []struct {
		name    string
		dt      DataType
		base    DevicePtr
		dims    []int64
		strides []int64
		box     []int
		ok      bool
	}{
		{"bf16", BFloat16, base, []int64{4096, 64}, []int64{8192}, []int{64, 256}, true},
		{"f16 past the end", Float16, base, []int64{256, 40}, []int64{512}, []int{64, 64}, true},
		{"gate and up rows interleaved", BFloat16, base, []int64{256, 8, 2, 25}, []int64{512, 512 * 200, 512 * 8}, []int{64, 8, 2, 16}, true},
		{"e4m3", E4M3, base, []int64{4096, 64}, []int64{4096}, []int{128, 256}, true},
		{"e4m3 box wider than the rows", E4M3, base, []int64{64, 48}, []int64{64}, []int{128, 64}, true},
		{"e4m3 box of 64 bytes", E4M3, base, []int64{4096, 64}, []int64{4096}, []int{64, 64}, false},
		{"box of 256 bytes", BFloat16, base, []int64{4096, 64}, []int64{8192}, []int{128, 64}, false},
		{"box of 257 rows", BFloat16, base, []int64{4096, 64}, []int64{8192}, []int{64, 257}, false},
		{"rows 8 bytes apart", BFloat16, base, []int64{4, 64}, []int64{8}, []int{64, 64}, false},
		{"base off 16 bytes", BFloat16, base + 8, []int64{4096, 64}, []int64{8192}, []int{64, 64}, false},
		{"rank 1", BFloat16, base, []int64{4096}, nil, []int{64}, false},
		{"rank 6", BFloat16, base, []int64{64, 2, 2, 2, 2, 2}, []int64{128, 256, 512, 1024, 2048}, []int{64, 1, 1, 1, 1, 1}, false},
		{"box of 0 rows", BFloat16, base, []int64{4096, 64}, []int64{8192}, []int{64, 0}, false},
		{"no rows", BFloat16, base, []int64{4096, 0}, []int64{8192}, []int{64, 64}, false},
		{"rows 24 bytes apart", BFloat16, base, []int64{8, 64}, []int64{24}, []int{64, 64}, false},
		{"rows 2^40 bytes apart", BFloat16, base, []int64{4096, 2}, []int64{1 << 40}, []int{64, 2}, false},
		{"strides missing", BFloat16, base, []int64{4096, 64, 2}, []int64{8192}, []int{64, 64, 1}, false},
		{"float32", Float32, base, []int64{4096, 64}, []int64{16384}, []int{64, 64}, false},
		{"linear e4m3 pages of d128", E4M3, base, []int64{128, 8, 16, 1 << 31}, []int64{128, 1024, 16384}, []int{128, 1, 16, 1}, true},
		{"linear e4m3 of 64 and 256 bytes", E4M3, base, []int64{256, 64}, []int64{256}, []int{64, 64}, true},
		{"linear e4m3 row of 256", E4M3, base, []int64{256, 64}, []int64{256}, []int{256, 8}, true},
		{"linear bf16 rows of 128 elements", BFloat16, base, []int64{4096, 64}, []int64{8192}, []int{128, 64}, true},
		{"linear e4m3 box of 24 bytes", E4M3, base, []int64{256, 64}, []int64{256}, []int{24, 64}, false},
		{"linear e4m3 row of 257", E4M3, base, []int64{512, 64}, []int64{512}, []int{257, 8}, false},
	} {
		encode := dev.EncodeTiled
		if strings.HasPrefix(c.name, "linear") {
			encode = dev.EncodeTiledLinear
		}
		_, err := encode(c.dt, c.base, c.dims, c.strides, c.box)
		if (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok %v", c.name, err, c.ok)
		}
	}
}
