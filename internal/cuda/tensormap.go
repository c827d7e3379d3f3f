//go:build cuda

package cuda

/*
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

// cuTensorMapEncodeTiled (driver API of CUDA 12 and newer; cuda.h 11.8 here does not declare it), resolved
// from the driver library at run time. The enums are plain ints: CUtensorMapDataType (UINT8 0, FLOAT16 6,
// BFLOAT16 9), CUtensorMapInterleave (NONE 0), CUtensorMapSwizzle (128B 3), CUtensorMapL2promotion
// (L2_256B 3), CUtensorMapFloatOOBfill (NONE 0); swizzle NONE is 0.
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

static inline int gollm_tmap_encode(void *map, int dtype, uint32_t rank, uint64_t addr, const uint64_t *dims,
		const uint64_t *strides, const uint32_t *box, int swizzle) {
	uint32_t es[5] = { 1, 1, 1, 1, 1 };
	return gollm_tmap_encode_fn(map, dtype, rank, (void *)addr, dims, strides, box, es, 0, swizzle, 3, 0);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// TensorMap is a tensor map (CUtensorMap): the description of a tiled tensor (2-D to 5-D) that the Hopper copy
// engine (cp.async.bulk.tensor) reads. Kernels take it by value, 64-byte aligned, as a __grid_constant__
// parameter: a Go parameter struct holds it at an offset that is a multiple of 64.
type TensorMap [128]byte

var tmapBind = sync.OnceValue(func() bool { return C.gollm_tmap_bind() != 0 })

// EncodeTiled describes a tensor of dt (Float16, BFloat16, or E4M3: bytes) at base for the Hopper copy
// engine: dims are its sizes (each ≤ 2³²), innermost (contiguous) first, strides the bytes between
// consecutive indices of dims 1 … (multiples of 16, < 2⁴⁰), box the tile one copy reads, with the
// 128-byte swizzle (an innermost box row of 128 bytes: box[0] elements of 2 bytes, or of 1 for E4M3;
// every box side ≤ 256). A box running past the
// tensor's edges is filled with zeros. Ranks 2 … 5. Needs a driver of CUDA 12 or newer and compute
// capability 9.0 to use.
//
// cuTensorMapEncodeTiled's documentation describes strides that nest (each a multiple of the one before
// times its dimension); the CUDA 13 driver also encodes strides in other orders, which the skinny GEMM's
// interleaved gate/up map uses (package model checks it once at load and does without it where a driver
// refuses; TestEncodeTiled's interleaved case fails on such a driver).
func (d *Device) EncodeTiled(dt DataType, base DevicePtr, dims, strides []int64, box []int) (TensorMap, error) {
	return d.encode(dt, base, dims, strides, box, true)
}

// EncodeTiledLinear is EncodeTiled without the swizzle: a box lands in shared memory as its rows one after
// another, an innermost row of box[0] elements of any multiple of 16 bytes (≤ 256 elements). The FP8
// prefill reads its pages' codes so (one box a page of D codes a row).
func (d *Device) EncodeTiledLinear(dt DataType, base DevicePtr, dims, strides []int64, box []int) (TensorMap, error) {
	return d.encode(dt, base, dims, strides, box, false)
}

func (d *Device) encode(dt DataType, base DevicePtr, dims, strides []int64, box []int, swizzle bool) (TensorMap, error) {
	var m TensorMap
	err := d.Do(func() error { // the driver wants the context current
		var err error
		m, err = encodeTiled(dt, base, dims, strides, box, swizzle)
		return err
	})
	return m, err
}

func encodeTiled(dt DataType, base DevicePtr, dims, strides []int64, box []int, swizzle bool) (TensorMap, error) {
	var m TensorMap
	if !tmapBind() {
		return m, errors.New("cuda: the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer)")
	}
	var code C.int
	size := 2 // bytes an element
	switch dt {
	case Float16:
		code = 6
	case BFloat16:
		code = 9
	case E4M3:
		code, size = 0, 1
	default:
		return m, fmt.Errorf("cuda: tensor map of %v", dt)
	}
	rank := len(dims)
	bad := rank < 2 || rank > 5 || len(strides) != rank-1 || len(box) != rank || uint64(base)%16 != 0
	if !bad && swizzle {
		bad = box[0]*size != 128
	} else if !bad {
		bad = box[0]*size%16 != 0
	}
	var cd, cs [5]C.uint64_t
	var cb [5]C.uint32_t
	for i := 0; !bad && i < rank; i++ {
		bad = dims[i] < 1 || dims[i] > 1<<32 || box[i] < 1 || box[i] > 256 ||
			i > 0 && (strides[i-1] < 16 || strides[i-1]%16 != 0 || strides[i-1] >= 1<<40)
		cd[i], cb[i] = C.uint64_t(dims[i]), C.uint32_t(box[i])
		if i > 0 {
			cs[i-1] = C.uint64_t(strides[i-1])
		}
	}
	if bad {
		return m, fmt.Errorf("cuda: tensor map of dims %v, strides %v, box %v, base %#x", dims, strides, box, base)
	}
	sw := C.int(0)
	if swizzle {
		sw = 3
	}
	if r := C.gollm_tmap_encode(unsafe.Pointer(&m[0]), code, C.uint32_t(rank), C.uint64_t(base), &cd[0], &cs[0], &cb[0], sw); r != 0 {
		return m, fmt.Errorf("cuda: cuTensorMapEncodeTiled (dims %v, strides %v, box %v): error %d", dims, strides, box, r)
	}
	return m, nil
}
