//go:build cuda

package cuda

/*
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

// cuTensorMapEncodeTiled (driver API of CUDA 12 and newer; cuda.h 11.8 here does not declare it), resolved
// from the driver library at run time. The enums are plain ints: CUtensorMapDataType (FLOAT16 6,
// BFLOAT16 9), CUtensorMapInterleave (NONE 0), CUtensorMapSwizzle (128B 3), CUtensorMapL2promotion
// (L2_256B 3), CUtensorMapFloatOOBfill (NONE 0).
typedef int (*gollm_tmap_encode_t)(void *map, int dtype, uint32_t rank, void *addr, const uint64_t *dims,
	const uint64_t *strides, const uint32_t *box, const uint32_t *elem_strides, int interleave, int swizzle,
	int l2promotion, int oobfill);

static gollm_tmap_encode_t gollm_tmap_encode_fn;

static inline int gollm_tmap_bind(void) {
	if (gollm_tmap_encode_fn) return 1;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) return 0;
	gollm_tmap_encode_fn = (gollm_tmap_encode_t)dlsym(lib, "cuTensorMapEncodeTiled");
	return gollm_tmap_encode_fn != 0;
}

static inline int gollm_tmap_encode_2d(void *map, int dtype, uint64_t addr, uint64_t cols, uint64_t rows,
		uint64_t row_bytes, uint32_t box_cols, uint32_t box_rows) {
	uint64_t dims[2] = { cols, rows }, strides[1] = { row_bytes };
	uint32_t box[2] = { box_cols, box_rows }, es[2] = { 1, 1 };
	return gollm_tmap_encode_fn(map, dtype, 2, (void *)addr, dims, strides, box, es, 0, 3, 3, 0);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// TensorMap is a tensor map (CUtensorMap): the description of a tiled 2-D matrix that the Hopper copy
// engine (cp.async.bulk.tensor) reads. Kernels take it by value, 64-byte aligned, as a __grid_constant__
// parameter: a Go parameter struct holds it at an offset that is a multiple of 64.
type TensorMap [128]byte

var tmapBind = sync.OnceValue(func() bool { return C.gollm_tmap_bind() != 0 })

// EncodeTiled2D describes the row-major matrix at base, rows × cols elements of dt (Float16 or BFloat16),
// rows rowBytes apart, read in tiles of boxRows × boxCols with the 128-byte swizzle (a tile row is 128
// bytes: boxCols · 2 = 128; boxRows ≤ 256). Tiles past the matrix's edges are filled with zeros. Needs a
// driver of CUDA 12 or newer and compute capability 9.0 to use.
func (d *Device) EncodeTiled2D(dt DataType, base DevicePtr, cols, rows, rowBytes int64, boxCols, boxRows int) (TensorMap, error) {
	var m TensorMap
	err := d.Do(func() error { // the driver wants the context current
		var err error
		m, err = encodeTiled2D(dt, base, cols, rows, rowBytes, boxCols, boxRows)
		return err
	})
	return m, err
}

func encodeTiled2D(dt DataType, base DevicePtr, cols, rows, rowBytes int64, boxCols, boxRows int) (TensorMap, error) {
	var m TensorMap
	if !tmapBind() {
		return m, errors.New("cuda: the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer)")
	}
	var code C.int
	switch dt {
	case Float16:
		code = 6
	case BFloat16:
		code = 9
	default:
		return m, fmt.Errorf("cuda: tensor map of %v", dt)
	}
	if boxCols*2 != 128 || boxRows < 1 || boxRows > 256 || rowBytes%16 != 0 || uint64(base)%16 != 0 {
		return m, fmt.Errorf("cuda: tensor map box %d × %d, row bytes %d, base %#x", boxRows, boxCols, rowBytes, base)
	}
	if r := C.gollm_tmap_encode_2d(unsafe.Pointer(&m[0]), code, C.uint64_t(base), C.uint64_t(cols), C.uint64_t(rows),
		C.uint64_t(rowBytes), C.uint32_t(boxCols), C.uint32_t(boxRows)); r != 0 {
		return m, fmt.Errorf("cuda: cuTensorMapEncodeTiled (%d × %d, box %d × %d): error %d", rows, cols, boxRows, boxCols, r)
	}
	return m, nil
}
