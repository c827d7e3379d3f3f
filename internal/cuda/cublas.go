//go:build cuda

package cuda

/*
#include <dlfcn.h>
#include <stdlib.h>
#include "gollm_cuda.h"

// The few cuBLAS entry points we use, resolved with dlsym so that the binary does not link a particular
// cuBLAS (Debian ships 11, the device 13). Types are spelled as plain ints: their values are part of
// cuBLAS's stable ABI (cublasOperation_t, cudaDataType, cublasComputeType_t, cublasGemmAlgo_t).
typedef int (*gollm_cublas_create_t)(void **);
typedef int (*gollm_cublas_destroy_t)(void *);
typedef int (*gollm_cublas_set_stream_t)(void *, CUstream);
typedef int (*gollm_cublas_get_version_t)(void *, int *);
typedef int (*gollm_cublas_gemm_ex_t)(void *, int, int, int, int, int, const void *, const void *, int, int,
	const void *, int, int, const void *, void *, int, int, int, int);
typedef int (*gollm_cublas_gemm_strided_batched_ex_t)(void *, int, int, int, int, int, const void *, const void *,
	int, int, long long, const void *, int, int, long long, const void *, void *, int, int, long long, int, int, int);

typedef struct {
	void *lib;
	gollm_cublas_create_t create;
	gollm_cublas_destroy_t destroy;
	gollm_cublas_set_stream_t set_stream;
	gollm_cublas_get_version_t get_version;
	gollm_cublas_gemm_ex_t gemm_ex;
	gollm_cublas_gemm_strided_batched_ex_t gemm_strided_batched_ex;
} gollm_cublas;

// gollm_cublas_bind resolves the symbols; it returns the name of the first missing one, or NULL.
static inline const char *gollm_cublas_bind(gollm_cublas *b) {
	GOLLM_BIND(create, gollm_cublas_create_t, "cublasCreate_v2")
	GOLLM_BIND(destroy, gollm_cublas_destroy_t, "cublasDestroy_v2")
	GOLLM_BIND(set_stream, gollm_cublas_set_stream_t, "cublasSetStream_v2")
	GOLLM_BIND(get_version, gollm_cublas_get_version_t, "cublasGetVersion_v2")
	GOLLM_BIND(gemm_ex, gollm_cublas_gemm_ex_t, "cublasGemmEx")
	GOLLM_BIND(gemm_strided_batched_ex, gollm_cublas_gemm_strided_batched_ex_t, "cublasGemmStridedBatchedEx")
	return NULL;
}

static inline int gollm_cublas_create(gollm_cublas *b, void **h) { return b->create(h); }
static inline int gollm_cublas_destroy(gollm_cublas *b, void *h) { return b->destroy(h); }
static inline int gollm_cublas_set_stream(gollm_cublas *b, void *h, CUstream s) { return b->set_stream(h, s); }
static inline int gollm_cublas_version(gollm_cublas *b, void *h, int *v) { return b->get_version(h, v); }

// gollm_cublas_gemm runs cublasGemmEx with float alpha/beta on the host and fp32 compute
// (CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1).
static inline int gollm_cublas_gemm(gollm_cublas *b, void *h, int ta, int tb, int m, int n, int k,
		float alpha, CUdeviceptr A, int at, int lda, CUdeviceptr B, int bt, int ldb,
		float beta, CUdeviceptr C, int ct, int ldc) {
	return b->gemm_ex(h, ta, tb, m, n, k, &alpha, (const void *)A, at, lda, (const void *)B, bt, ldb,
		&beta, (void *)C, ct, ldc, 68, -1);
}

// gollm_cublas_gemm_batched runs cublasGemmStridedBatchedEx likewise.
static inline int gollm_cublas_gemm_batched(gollm_cublas *b, void *h, int ta, int tb, int m, int n, int k,
		float alpha, CUdeviceptr A, int at, int lda, long long sa, CUdeviceptr B, int bt, int ldb, long long sb,
		float beta, CUdeviceptr C, int ct, int ldc, long long sc, int count) {
	return b->gemm_strided_batched_ex(h, ta, tb, m, n, k, &alpha, (const void *)A, at, lda, sa, (const void *)B, bt,
		ldb, sb, &beta, (void *)C, ct, ldc, sc, count, 68, -1);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"unsafe"
)

// ErrNoCUBLAS is returned by LoadBLAS when no cuBLAS library could be loaded.
var ErrNoCUBLAS = errors.New("cuda: cuBLAS not found")

// DataType is a cuBLAS element type (cudaDataType).
type DataType int

// The element types GemmEx accepts.
const (
	Float32  DataType = 0  // CUDA_R_32F
	Float16  DataType = 2  // CUDA_R_16F
	BFloat16 DataType = 14 // CUDA_R_16BF
	// E4M3 is an FP8 code (CUDA_R_8F_E4M3): GemmEx does not take it; tensor maps (EncodeTiled) and
	// cuBLASLt's e4m3 GEMM do.
	E4M3 DataType = 28
)

// Op says whether GemmEx uses a matrix as stored or transposed (cublasOperation_t).
type Op int

// The operations.
const (
	NoTrans Op = 0
	Trans   Op = 1
)

// cublasLibraries are tried in order: the newest first, by soname (the loader's search path,
// LD_LIBRARY_PATH included), then in CUDA's usual install folder.
var cublasLibraries = []string{
	"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
	"/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
	"/usr/local/cuda/lib64/libcublas.so.11",
}

// BLAS is a cuBLAS handle on a Device, bound to a stream.
type BLAS struct {
	dev     *Device
	lib     *C.gollm_cublas
	handle  unsafe.Pointer
	path    string
	version int
}

// LoadBLAS loads cuBLAS with dlopen (GOLLM_CUBLAS names a file to try first) and creates a handle in
// the device's context.
func (d *Device) LoadBLAS() (*BLAS, error) {
	candidates := cublasLibraries
	if p := os.Getenv("GOLLM_CUBLAS"); p != "" {
		candidates = append([]string{p}, candidates...)
	}
	handle, path, err := openLibrary(candidates, ErrNoCUBLAS)
	if err != nil {
		return nil, err
	}
	lib := (*C.gollm_cublas)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gollm_cublas{}))))
	lib.lib = handle
	b := &BLAS{dev: d, lib: lib, path: path}
	if missing := C.gollm_cublas_bind(lib); missing != nil {
		C.free(unsafe.Pointer(lib))
		return nil, fmt.Errorf("cuda: %s: missing symbol %s", b.path, C.GoString(missing))
	}
	err = d.Do(func() error {
		if st := C.gollm_cublas_create(lib, &b.handle); st != 0 {
			return fmt.Errorf("cublasCreate: status %d", int(st))
		}
		var v C.int
		if st := C.gollm_cublas_version(lib, b.handle, &v); st != 0 {
			return fmt.Errorf("cublasGetVersion: status %d", int(st))
		}
		b.version = int(v)
		return nil
	})
	if err != nil {
		C.free(unsafe.Pointer(lib))
		return nil, fmt.Errorf("cuda: %s: %w", b.path, err)
	}
	return b, nil
}

// Library returns the file that was loaded and cuBLAS's version number (e.g. 130000).
func (b *BLAS) Library() (path string, version int) { return b.path, b.version }

// SetStream makes later calls queue on s (nil: the legacy default stream).
func (b *BLAS) SetStream(s *Stream) error {
	return b.dev.Do(func() error {
		if st := C.gollm_cublas_set_stream(b.lib, b.handle, cStream(s.handle())); st != 0 {
			return fmt.Errorf("cuda: cublasSetStream: status %d", int(st))
		}
		return nil
	})
}

// GemmEx queues C = alpha·op(A)·op(B) + beta·C in cuBLAS's column-major convention: op(A) is m×k, op(B)
// k×n, C m×n, with leading dimensions lda, ldb, ldc; A and B are fp16 or bf16 (or fp32), C any of those,
// and the products are accumulated in fp32 (CUBLAS_COMPUTE_32F, never TF32). A row-major product
// Y[M][N] = X[M][K]·W[N][K]ᵀ is GemmEx(Trans, NoTrans, N, M, K, 1, W, t, K, X, t, K, 0, Y, t, N).
func (b *BLAS) GemmEx(transA, transB Op, m, n, k int, alpha float32, a DevicePtr, aType DataType, lda int,
	bm DevicePtr, bType DataType, ldb int, beta float32, c DevicePtr, cType DataType, ldc int) error {
	return b.dev.Do(func() error {
		st := C.gollm_cublas_gemm(b.lib, b.handle, C.int(transA), C.int(transB), C.int(m), C.int(n), C.int(k),
			C.float(alpha), C.CUdeviceptr(a), C.int(aType), C.int(lda),
			C.CUdeviceptr(bm), C.int(bType), C.int(ldb),
			C.float(beta), C.CUdeviceptr(c), C.int(cType), C.int(ldc))
		if st != 0 {
			return fmt.Errorf("cuda: cublasGemmEx m=%d n=%d k=%d: status %d", m, n, k, int(st))
		}
		return nil
	})
}

// GemmStridedBatchedEx queues count products as GemmEx does, product i on A + i·strideA, B + i·strideB and
// C + i·strideC (strides in elements). With strides along k into the same A and B and C's apart it splits
// one product's k into count partial products (the caller sums them); with A's and C's strides along the
// output rows and B's zero, it deals one product's output rows out into count parts.
func (b *BLAS) GemmStridedBatchedEx(transA, transB Op, m, n, k int, alpha float32, a DevicePtr, aType DataType,
	lda int, strideA int64, bm DevicePtr, bType DataType, ldb int, strideB int64, beta float32, c DevicePtr,
	cType DataType, ldc int, strideC int64, count int) error {
	return b.dev.Do(func() error {
		st := C.gollm_cublas_gemm_batched(b.lib, b.handle, C.int(transA), C.int(transB), C.int(m), C.int(n), C.int(k),
			C.float(alpha), C.CUdeviceptr(a), C.int(aType), C.int(lda), C.longlong(strideA),
			C.CUdeviceptr(bm), C.int(bType), C.int(ldb), C.longlong(strideB),
			C.float(beta), C.CUdeviceptr(c), C.int(cType), C.int(ldc), C.longlong(strideC), C.int(count))
		if st != 0 {
			return fmt.Errorf("cuda: cublasGemmStridedBatchedEx m=%d n=%d k=%d count=%d: status %d", m, n, k, count, int(st))
		}
		return nil
	})
}

// Destroy releases the handle (the library stays loaded).
func (b *BLAS) Destroy() error {
	return b.dev.Do(func() error {
		if st := C.gollm_cublas_destroy(b.lib, b.handle); st != 0 {
			return fmt.Errorf("cuda: cublasDestroy: status %d", int(st))
		}
		C.free(unsafe.Pointer(b.lib))
		return nil
	})
}
