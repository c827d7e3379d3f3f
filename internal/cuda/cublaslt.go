//go:build cuda

package cuda

/*
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include "gollm_cuda.h"

// The cuBLASLt entry points of the FP8 product, resolved with dlsym like cuBLAS's (cublas.go). Handles
// and descriptors are opaque pointers; enum values are part of cuBLASLt's stable ABI.
typedef int (*gollm_lt_create_t)(void **);
typedef int (*gollm_lt_destroy_t)(void *);
typedef size_t (*gollm_lt_version_t)(void);
typedef int (*gollm_lt_desc_create_t)(void **, int, int);
typedef int (*gollm_lt_desc_destroy_t)(void *);
typedef int (*gollm_lt_desc_set_t)(void *, int, const void *, size_t);
typedef int (*gollm_lt_layout_create_t)(void **, int, uint64_t, uint64_t, int64_t);
typedef int (*gollm_lt_layout_destroy_t)(void *);
typedef int (*gollm_lt_pref_create_t)(void **);
typedef int (*gollm_lt_pref_destroy_t)(void *);
typedef int (*gollm_lt_pref_set_t)(void *, int, const void *, size_t);

// cublasLtMatmulHeuristicResult_t.
typedef struct {
	uint64_t algo[8];
	size_t workspace;
	int state;
	float waves;
	int reserved[4];
} gollm_lt_heuristic;

typedef int (*gollm_lt_heuristic_t)(void *, void *, void *, void *, void *, void *, void *, int, gollm_lt_heuristic *, int *);
typedef int (*gollm_lt_matmul_t)(void *, void *, const void *, const void *, void *, const void *, void *,
	const void *, const void *, void *, void *, void *, const void *, void *, size_t, CUstream);

typedef struct {
	void *lib;
	gollm_lt_create_t create;
	gollm_lt_destroy_t destroy;
	gollm_lt_version_t version;
	gollm_lt_desc_create_t desc_create;
	gollm_lt_desc_destroy_t desc_destroy;
	gollm_lt_desc_set_t desc_set;
	gollm_lt_layout_create_t layout_create;
	gollm_lt_layout_destroy_t layout_destroy;
	gollm_lt_pref_create_t pref_create;
	gollm_lt_pref_destroy_t pref_destroy;
	gollm_lt_pref_set_t pref_set;
	gollm_lt_heuristic_t heuristic;
	gollm_lt_matmul_t matmul;
} gollm_lt;


// gollm_lt_bind resolves the symbols; it returns the name of the first missing one, or NULL.
static inline const char *gollm_lt_bind(gollm_lt *b) {
	GOLLM_BIND(create, gollm_lt_create_t, "cublasLtCreate")
	GOLLM_BIND(destroy, gollm_lt_destroy_t, "cublasLtDestroy")
	GOLLM_BIND(version, gollm_lt_version_t, "cublasLtGetVersion")
	GOLLM_BIND(desc_create, gollm_lt_desc_create_t, "cublasLtMatmulDescCreate")
	GOLLM_BIND(desc_destroy, gollm_lt_desc_destroy_t, "cublasLtMatmulDescDestroy")
	GOLLM_BIND(desc_set, gollm_lt_desc_set_t, "cublasLtMatmulDescSetAttribute")
	GOLLM_BIND(layout_create, gollm_lt_layout_create_t, "cublasLtMatrixLayoutCreate")
	GOLLM_BIND(layout_destroy, gollm_lt_layout_destroy_t, "cublasLtMatrixLayoutDestroy")
	GOLLM_BIND(pref_create, gollm_lt_pref_create_t, "cublasLtMatmulPreferenceCreate")
	GOLLM_BIND(pref_destroy, gollm_lt_pref_destroy_t, "cublasLtMatmulPreferenceDestroy")
	GOLLM_BIND(pref_set, gollm_lt_pref_set_t, "cublasLtMatmulPreferenceSetAttribute")
	GOLLM_BIND(heuristic, gollm_lt_heuristic_t, "cublasLtMatmulAlgoGetHeuristic")
	GOLLM_BIND(matmul, gollm_lt_matmul_t, "cublasLtMatmul")
	return NULL;
}

static inline int gollm_lt_create(gollm_lt *b, void **h) { return b->create(h); }
static inline int gollm_lt_destroy(gollm_lt *b, void *h) { return b->destroy(h); }
static inline size_t gollm_lt_version(gollm_lt *b) { return b->version(); }

// The FP8 plan: D (m×n, column-major, ld ldd, of dtype_d: float32 in the products, CUDA_R_32F = 0, or
// bfloat16, 14) = op(A)·B with A stored k×m (transposed: the row-major [m][k] of a Linear weight) and B
// k×n, both e4m3 (CUDA_R_8F_E4M3 = 28), float32 compute and scale (CUBLAS_COMPUTE_32F = 68), fast
// accumulation as asked (CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25, int8_t; off in the products, cuBLASLt's
// default, set so that no default can change it: the tensor cores' partial sums, which keep about 13
// fraction bits, are promoted to float32 periodically rather than carried over all of k). Attributes: CUBLASLT_MATMUL_DESC_TRANSA = 3, TRANSB = 4, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1.
#define GOLLM_LT_CANDIDATES 8
typedef struct {
	void *desc, *a, *b, *d, *pref;
	gollm_lt_heuristic h;                           // the algorithm the plan runs
	gollm_lt_heuristic cand[GOLLM_LT_CANDIDATES]; // the heuristic's, best first
	int found;
} gollm_lt_plan;

static inline void gollm_lt_plan_free(gollm_lt *b, gollm_lt_plan *p) {
	if (p->pref) b->pref_destroy(p->pref);
	if (p->d) b->layout_destroy(p->d);
	if (p->b) b->layout_destroy(p->b);
	if (p->a) b->layout_destroy(p->a);
	if (p->desc) b->desc_destroy(p->desc);
}

// gollm_lt_plan_make fills p; it returns the failing step (1-6, 7: no algorithm, 8: scale modes) and its
// status. With scaled, A and B are scaled by vectors (CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31, B = 32,
// CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F = 3: one float a row of op(A), one a column of B).
static inline int gollm_lt_plan_make(gollm_lt *b, void *h, gollm_lt_plan *p, int m, int n, int k, int lda, int ldb,
		int ldd, uint64_t workspace, int scaled, int dtype_d, int8_t fast, int *status) {
	int st, trans = 1, notrans = 0, found = 0, outer = 3;
	if ((st = b->desc_create(&p->desc, 68, 0))) { *status = st; return 1; }
	if ((st = b->desc_set(p->desc, 3, &trans, sizeof trans))) { *status = st; return 2; }
	if ((st = b->desc_set(p->desc, 4, &notrans, sizeof notrans))) { *status = st; return 2; }
	if ((st = b->desc_set(p->desc, 25, &fast, sizeof fast))) { *status = st; return 2; }
	if (scaled && ((st = b->desc_set(p->desc, 31, &outer, sizeof outer)) || (st = b->desc_set(p->desc, 32, &outer, sizeof outer)))) {
		*status = st;
		return 8;
	}
	if ((st = b->layout_create(&p->a, 28, k, m, lda))) { *status = st; return 3; }
	if ((st = b->layout_create(&p->b, 28, k, n, ldb))) { *status = st; return 3; }
	if ((st = b->layout_create(&p->d, dtype_d, m, n, ldd))) { *status = st; return 3; }
	if ((st = b->pref_create(&p->pref))) { *status = st; return 4; }
	if ((st = b->pref_set(p->pref, 1, &workspace, sizeof workspace))) { *status = st; return 5; }
	if ((st = b->heuristic(h, p->desc, p->a, p->b, p->d, p->d, p->pref, GOLLM_LT_CANDIDATES, p->cand, &found))) {
		*status = st;
		return 6;
	}
	if (found < 1) { *status = 0; return 7; }
	p->found = found;
	p->h = p->cand[0];
	return 0;
}

// gollm_lt_choose makes candidate i the algorithm plan p runs; it returns 0 when i is not one the
// heuristic offered in working order within workspace bytes.
static inline int gollm_lt_choose(gollm_lt_plan *p, int i, uint64_t workspace) {
	if (i < 0 || i >= p->found || p->cand[i].state != 0 || p->cand[i].workspace > workspace) return 0;
	p->h = p->cand[i];
	return 1;
}

// gollm_lt_run runs a plan; a scaled plan's scale vectors are sa and sb (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER
// = 17, B = 18), set on its descriptor first.
static inline int gollm_lt_run(gollm_lt *b, void *h, gollm_lt_plan *p, CUdeviceptr A, CUdeviceptr B, CUdeviceptr D,
		CUdeviceptr sa, CUdeviceptr sb, CUdeviceptr ws, size_t wsBytes, CUstream s) {
	float one = 1, zero = 0;
	int st;
	if (sa) {
		const void *pa = (const void *)sa, *pb = (const void *)sb;
		if ((st = b->desc_set(p->desc, 17, &pa, sizeof pa)) || (st = b->desc_set(p->desc, 18, &pb, sizeof pb))) return st;
	}
	return b->matmul(h, p->desc, &one, (const void *)A, p->a, (const void *)B, p->b, &zero, (const void *)D, p->d,
		(void *)D, p->d, p->h.algo, (void *)ws, wsBytes, s);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"
)

// ErrNoCUBLASLt is returned by LoadBLASLt when no cuBLASLt library could be loaded.
var ErrNoCUBLASLt = errors.New("cuda: cuBLASLt not found")

// cublasLtLibraries are tried after the folder of the cuBLAS that LoadBLAS loaded, as cublasLibraries.
var cublasLtLibraries = []string{
	"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11",
	"/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12",
	"/usr/local/cuda/lib64/libcublasLt.so.11",
}

// ltWorkspaceBytes is the workspace every cuBLASLt product may use (allocated once: a product captured
// into a graph must not allocate).
const ltWorkspaceBytes = 32 << 20

// BLASLt is a cuBLASLt handle on a Device, with its workspace and the plans (descriptors and the
// algorithm chosen) of the shapes it ran.
type BLASLt struct {
	dev     *Device
	lib     *C.gollm_lt
	handle  unsafe.Pointer
	path    string
	version int
	ws      DevicePtr
	plans   map[ltShape]*C.gollm_lt_plan
	// TuneRows, when set, says whether a new plan of rows tokens (cuBLAS's n, ltTuneMinRows to
	// ltTuneRows) times its candidates (tune); nil: every such plan does. Each timing stalls the
	// stream once, so a caller names the row counts it runs over and over.
	TuneRows func(rows int) bool
	// tuned counts the plans tune timed, retuned those it moved off the heuristic's first algorithm.
	tuned, retuned int
}

// ltTuneRows is the most rows (cuBLAS's n: the tokens of a product Y = X·Wᵀ) whose plan tune times.
// Above it the heuristic's first algorithm times as the fastest of its candidates or within a few per
// cent of it (docs/bench/fp8-h200.md).
const ltTuneRows = 256

// ltTuneMinRows is the fewest: below it every candidate is a short launch that times within noise.
const ltTuneMinRows = 16

// ltTuneMargin is how much faster (a fraction of its time) a candidate must time than the heuristic's
// first to replace it, so that near ties keep the heuristic's choice from run to run.
const ltTuneMargin = 0.03

type ltShape struct {
	m, n, k, lda, ldb, ldd int
	scaled                 bool
	form                   ltForm
}

// ltForm is what a plan asks of cuBLASLt beyond its shape: the output's type (float32, the products'
// own, unless out16 names bfloat16) and fast accumulation (the tensor cores' partial sums carried over
// all of k instead of promoted to float32 as they go). The products use the zero form; the others are
// measured against it (BenchmarkLtE4M3Forms).
type ltForm struct {
	out16 bool
	fast  bool
}

// LoadBLASLt loads cuBLASLt with dlopen (GOLLM_CUBLASLT names a file to try first, then the folder of
// blas's library when it has one), creates a handle and allocates its workspace.
func (d *Device) LoadBLASLt(blas *BLAS) (*BLASLt, error) {
	candidates := slicesClone(cublasLtLibraries)
	if blas != nil && filepath.IsAbs(blas.path) {
		dir, base := filepath.Split(blas.path)
		candidates = append([]string{dir + strings.Replace(base, "libcublas.", "libcublasLt.", 1)}, candidates...)
	}
	if p := os.Getenv("GOLLM_CUBLASLT"); p != "" {
		candidates = append([]string{p}, candidates...)
	}
	handle, path, err := openLibrary(candidates, ErrNoCUBLASLt)
	if err != nil {
		return nil, err
	}
	lib := (*C.gollm_lt)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gollm_lt{}))))
	lib.lib = handle
	b := &BLASLt{dev: d, lib: lib, path: path, plans: map[ltShape]*C.gollm_lt_plan{}}
	if missing := C.gollm_lt_bind(lib); missing != nil {
		C.free(unsafe.Pointer(lib))
		return nil, fmt.Errorf("cuda: %s: missing symbol %s", b.path, C.GoString(missing))
	}
	b.version = int(C.gollm_lt_version(lib))
	err = d.Do(func() error {
		if st := C.gollm_lt_create(lib, &b.handle); st != 0 {
			return fmt.Errorf("cublasLtCreate: status %d", int(st))
		}
		return nil
	})
	if err != nil {
		C.free(unsafe.Pointer(lib))
		return nil, fmt.Errorf("cuda: %s: %w", b.path, err)
	}
	if b.ws, err = d.Alloc(ltWorkspaceBytes); err != nil {
		b.Destroy()
		return nil, err
	}
	return b, nil
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// Library returns the file that was loaded and cuBLASLt's version number.
func (b *BLASLt) Library() (path string, version int) { return b.path, b.version }

// LtE4M3Tolerance bounds how far an element of MatmulE4M3's product may be from the exact sum of its
// products p, as a fraction of Σ|p|. Products of two e4m3 values are exact, but the tensor cores add an
// MMA's 32 products (k = 32 for e4m3) to the accumulator aligned to the largest of them, keeping about 13
// fraction bits (the DeepSeek-V3 report measures about 14 retained on Hopper) and dropping the rest;
// without fast accumulation cuBLASLt promotes those partial sums to float32 as it goes. Each of an MMA's
// 32 addends then loses less than 2^-13 of that MMA's largest product, itself at most the Σ|p| of the
// MMA's products: 32·2^-13 = 2^-8 of Σ|p| in all. (Where cuBLASLt carries a partial sum over a few MMAs
// before promoting it, their addends are aligned to it too and the worst case is a few times larger;
// truncations of products of both signs mostly cancel, and random products stay far inside 2^-8.)
// float32's own rounding (2^-24 a sum) is far below.
const LtE4M3Tolerance = 0x1p-8

// MatmulE4M3 queues, on s, D = op(A)·B in cuBLAS's column-major convention for e4m3 operands: op(A) is
// m×k, stored transposed (k×m, leading dimension lda: a row-major [m][k] matrix), B k×n (ldb), D m×n of
// float32 (ldd), the products summed in float32 (no fast accumulation) and nothing scaled. The row-major
// product Y[M][N] = X[M][K]·W[N][K]ᵀ is MatmulE4M3(N, M, K, W, K, X, K, Y, N, s). cuBLASLt's FP8 needs
// compute capability 8.9 or newer, k, lda and ldb multiples of 16 and 16-byte aligned pointers; a shape
// it cannot run returns an error. The first call of a shape asks cuBLASLt's heuristic for candidate
// algorithms and keeps the plan; at decode rows (ltTuneMinRows to ltTuneRows tokens) it times them on s
// first (tune) and keeps the fastest.
func (b *BLASLt) MatmulE4M3(m, n, k int, a DevicePtr, lda int, bm DevicePtr, ldb int, d DevicePtr, ldd int, s *Stream) error {
	return b.MatmulE4M3Scaled(m, n, k, a, lda, bm, ldb, d, ldd, 0, 0, s)
}

// MatmulE4M3BF16 is MatmulE4M3 with D of bfloat16: each unscaled sum rounded once, half the bytes of
// float32's to write and to read back.
func (b *BLASLt) MatmulE4M3BF16(m, n, k int, a DevicePtr, lda int, bm DevicePtr, ldb int, d DevicePtr, ldd int, s *Stream) error {
	return b.matmulE4M3Form(ltForm{out16: true}, m, n, k, a, lda, bm, ldb, d, ldd, 0, 0, s)
}

// MatmulE4M3Scaled is MatmulE4M3 with D's row i and column j scaled by sa[i]·sb[j] (float32 vectors of m
// and n on the device: cuBLASLt's outer-vector scaling, cuBLAS 12.9 and newer) where sa is not 0. Whether
// a library computes it, and along which dimensions, is the caller's to check once (a library without
// the mode returns an error).
func (b *BLASLt) MatmulE4M3Scaled(m, n, k int, a DevicePtr, lda int, bm DevicePtr, ldb int, d DevicePtr, ldd int,
	sa, sb DevicePtr, s *Stream) error {
	return b.matmulE4M3Form(ltForm{}, m, n, k, a, lda, bm, ldb, d, ldd, sa, sb, s)
}

func (b *BLASLt) matmulE4M3Form(form ltForm, m, n, k int, a DevicePtr, lda int, bm DevicePtr, ldb int, d DevicePtr, ldd int,
	sa, sb DevicePtr, s *Stream) error {
	key := ltShape{m, n, k, lda, ldb, ldd, sa != 0, form}
	scaled, dtypeD, fast := C.int(0), C.int(Float32), C.int8_t(0)
	if key.scaled {
		scaled = 1
	}
	if form.out16 {
		dtypeD = C.int(BFloat16)
	}
	if form.fast {
		fast = 1
	}
	run := func(p *C.gollm_lt_plan) func() error {
		return func() error {
			if st := C.gollm_lt_run(b.lib, b.handle, p, C.CUdeviceptr(a), C.CUdeviceptr(bm), C.CUdeviceptr(d), C.CUdeviceptr(sa),
				C.CUdeviceptr(sb), C.CUdeviceptr(b.ws), C.size_t(ltWorkspaceBytes), cStream(s.handle())); st != 0 {
				return fmt.Errorf("cuda: cublasLtMatmul e4m3 m=%d n=%d k=%d: status %d", m, n, k, int(st))
			}
			return nil
		}
	}
	return b.dev.Do(func() error {
		p, ok := b.plans[key]
		if !ok {
			p = (*C.gollm_lt_plan)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gollm_lt_plan{}))))
			var status C.int
			if step := C.gollm_lt_plan_make(b.lib, b.handle, p, C.int(m), C.int(n), C.int(k), C.int(lda), C.int(ldb),
				C.int(ldd), C.uint64_t(ltWorkspaceBytes), scaled, dtypeD, fast, &status); step != 0 {
				C.gollm_lt_plan_free(b.lib, p)
				C.free(unsafe.Pointer(p))
				what := [...]string{"", "descriptor", "transposes and accumulation", "layouts", "preference", "workspace", "heuristic", "no algorithm",
					"scale modes"}[step]
				return fmt.Errorf("cuda: cublasLt e4m3 m=%d n=%d k=%d: %s: status %d", m, n, k, what, int(status))
			}
			if n >= ltTuneMinRows && n <= ltTuneRows && (b.TuneRows == nil || b.TuneRows(n)) && !capturing(s) {
				if err := b.tune(p, s, run(p)); err != nil {
					C.gollm_lt_plan_free(b.lib, p)
					C.free(unsafe.Pointer(p))
					return fmt.Errorf("cuda: cublasLt e4m3 m=%d n=%d k=%d: %w", m, n, k, err)
				}
			}
			b.plans[key] = p
		}
		return run(p)()
	})
}

// tune times each of p's candidate algorithms on run (a launch of the call that makes the plan, on its
// stream, which it drains) and keeps the fastest where it beats the heuristic's first by ltTuneMargin.
// At a decode step's few rows the heuristic's first pick can be much slower than another of its
// candidates (docs/bench/fp8-h200.md); the products of one shape then run the same algorithm for the
// rest of the process. Plans made while the stream is captured into a graph are not timed (a capture
// cannot wait for the device): the backend runs each bucket of decode steps eagerly before it captures
// it, so their plans are made then.
func (b *BLASLt) tune(p *C.gollm_lt_plan, stream *Stream, run func() error) error {
	const warmup, iters = 2, 9
	start, end := make([]*Event, iters), make([]*Event, iters)
	defer func() {
		for i := range iters {
			for _, e := range []*Event{start[i], end[i]} {
				if e != nil {
					_ = e.Destroy()
				}
			}
		}
	}()
	for i := range iters {
		var err error
		if start[i], err = b.dev.NewEvent(); err == nil {
			end[i], err = b.dev.NewEvent()
		}
		if err != nil {
			return err
		}
	}
	times := make([]float64, int(p.found))
	for c := range times {
		times[c] = math.Inf(1)
		if C.gollm_lt_choose(p, C.int(c), C.uint64_t(ltWorkspaceBytes)) == 0 {
			continue
		}
		failed := false
		for range warmup {
			if err := run(); err != nil {
				failed = true // an algorithm that fails to launch is never chosen
				break
			}
		}
		if failed {
			continue
		}
		us := make([]float64, iters)
		for i := 0; i < iters && !failed; i++ {
			if err := start[i].Record(stream); err != nil {
				return err
			}
			failed = run() != nil
			if err := end[i].Record(stream); err != nil {
				return err
			}
		}
		if err := end[iters-1].Synchronize(); err != nil || failed {
			if err != nil {
				return err
			}
			continue
		}
		for i := range iters {
			ms, err := start[i].Elapsed(end[i])
			if err != nil {
				return err
			}
			us[i] = ms * 1e3
		}
		slices.Sort(us)
		times[c] = us[iters/2]
	}
	best := 0
	for c, t := range times {
		if t < times[0]*(1-ltTuneMargin) && t < times[best] {
			best = c
		}
	}
	if C.gollm_lt_choose(p, C.int(best), C.uint64_t(ltWorkspaceBytes)) == 0 {
		return fmt.Errorf("no candidate algorithm runs")
	}
	b.tuned++
	if best != 0 {
		b.retuned++
	}
	return nil
}

// Destroy releases the plans, the workspace and the handle (the library stays loaded); a second call
// does nothing.
func (b *BLASLt) Destroy() error {
	if b == nil || b.lib == nil { // destroyed already
		return nil
	}
	var errs []error
	errs = append(errs, b.dev.Do(func() error {
		for k, p := range b.plans {
			C.gollm_lt_plan_free(b.lib, p)
			C.free(unsafe.Pointer(p))
			delete(b.plans, k)
		}
		if b.handle != nil {
			if st := C.gollm_lt_destroy(b.lib, b.handle); st != 0 {
				return fmt.Errorf("cuda: cublasLtDestroy: status %d", int(st))
			}
		}
		return nil
	}))
	if b.ws != 0 {
		errs = append(errs, b.dev.Free(b.ws))
	}
	C.free(unsafe.Pointer(b.lib))
	b.lib, b.handle, b.ws = nil, nil, 0
	return errors.Join(errs...)
}

// capturing reports whether s is being captured into a graph, or may be: true where the driver cannot
// say, so that nothing waits for the device inside a capture.
func capturing(s *Stream) bool {
	var on C.int
	return C.gollm_capturing(cStream(s.handle()), &on) != C.CUDA_SUCCESS || on != 0
}

// candidate makes the plan of the unscaled float32 product of shape (m, n, k, lda, ldb, ldd), made by an
// earlier call, run its heuristic's candidate i: the tests run every algorithm tune may choose. It is
// false where there is no such plan or candidate.
func (b *BLASLt) candidate(m, n, k, lda, ldb, ldd, i int) bool {
	p := b.plans[ltShape{m, n, k, lda, ldb, ldd, false, ltForm{}}]
	return p != nil && C.gollm_lt_choose(p, C.int(i), C.uint64_t(ltWorkspaceBytes)) != 0
}
