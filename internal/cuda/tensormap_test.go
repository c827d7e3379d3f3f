//go:build cuda

package cuda

import "testing"

// TestEncodeTiled2D checks the tensor-map encoder: a bfloat16 and a float16 matrix with 128-byte rows in
// the box (and a box taller than what is left of the matrix, which the copy engine zero-fills) encode;
// boxes the 128-byte swizzle cannot serve, misaligned rows or bases and other dtypes are refused with an
// error. (The copies themselves are checked by package model's GEMM tests.)
func TestEncodeTiled2D(t *testing.T) {
	dev := openDevice(t)
	base, err := dev.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(base)
	for _, c := range []struct {
		name             string
		dt               DataType
		base             DevicePtr
		cols, rows, rowB int64
		boxCols, boxRows int
		ok               bool
	}{
		{"bf16", BFloat16, base, 4096, 64, 8192, 64, 256, true},
		{"f16 past the end", Float16, base, 256, 40, 512, 64, 64, true},
		{"box of 256 bytes", BFloat16, base, 4096, 64, 8192, 128, 64, false},
		{"box of 257 rows", BFloat16, base, 4096, 64, 8192, 64, 257, false},
		{"rows 8 bytes apart", BFloat16, base, 4, 64, 8, 64, 64, false},
		{"base off 16 bytes", BFloat16, base + 8, 4096, 64, 8192, 64, 64, false},
		{"float32", Float32, base, 4096, 64, 16384, 64, 64, false},
	} {
		_, err := dev.EncodeTiled2D(c.dt, c.base, c.cols, c.rows, c.rowB, c.boxCols, c.boxRows)
		if (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok %v", c.name, err, c.ok)
		}
	}
}
