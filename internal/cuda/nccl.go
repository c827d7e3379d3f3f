//go:build cuda

package cuda

/*
#include <dlfcn.h>
#include <stdlib.h>
#include "gollm_cuda.h"

// The NCCL entry points of tensor parallelism, resolved with dlsym like cuBLAS's (cublas.go), so that a
// binary neither links NCCL nor needs it unless it shards a model over GPUs. ncclResult_t,
// ncclDataType_t and ncclRedOp_t are plain ints of NCCL's stable ABI; ncclComm_t is a pointer;
// ncclUniqueId (unused: one process creates every rank's communicator with ncclCommInitAll) is not
// declared.
typedef int (*gollm_nccl_version_t)(int *);
typedef int (*gollm_nccl_init_all_t)(void **, int, const int *);
typedef int (*gollm_nccl_comm_t)(void *);
typedef int (*gollm_nccl_async_error_t)(void *, int *);
typedef const char *(*gollm_nccl_error_string_t)(int);
typedef int (*gollm_nccl_all_reduce_t)(const void *, void *, size_t, int, int, void *, CUstream);
typedef int (*gollm_nccl_all_gather_t)(const void *, void *, size_t, int, void *, CUstream);

typedef struct {
	void *lib;
	gollm_nccl_version_t version;
	gollm_nccl_init_all_t init_all;
	gollm_nccl_comm_t destroy, abort;
	gollm_nccl_async_error_t async_error;
	gollm_nccl_error_string_t error_string;
	gollm_nccl_all_reduce_t all_reduce;
	gollm_nccl_all_gather_t all_gather;
} gollm_nccl;


// gollm_nccl_bind resolves the symbols; it returns the name of the first missing one, or NULL.
static inline const char *gollm_nccl_bind(gollm_nccl *b) {
	GOLLM_BIND(version, gollm_nccl_version_t, "ncclGetVersion")
	GOLLM_BIND(init_all, gollm_nccl_init_all_t, "ncclCommInitAll")
	GOLLM_BIND(destroy, gollm_nccl_comm_t, "ncclCommDestroy")
	GOLLM_BIND(abort, gollm_nccl_comm_t, "ncclCommAbort")
	GOLLM_BIND(async_error, gollm_nccl_async_error_t, "ncclCommGetAsyncError")
	GOLLM_BIND(error_string, gollm_nccl_error_string_t, "ncclGetErrorString")
	GOLLM_BIND(all_reduce, gollm_nccl_all_reduce_t, "ncclAllReduce")
	GOLLM_BIND(all_gather, gollm_nccl_all_gather_t, "ncclAllGather")
	return NULL;
}

static inline int gollm_nccl_version(gollm_nccl *b, int *v) { return b->version(v); }
static inline int gollm_nccl_init_all(gollm_nccl *b, void **comms, int n, const int *devs) {
	return b->init_all(comms, n, devs);
}
static inline int gollm_nccl_destroy(gollm_nccl *b, void *c) { return b->destroy(c); }
static inline int gollm_nccl_abort(gollm_nccl *b, void *c) { return b->abort(c); }
static inline int gollm_nccl_async_error(gollm_nccl *b, void *c, int *e) { return b->async_error(c, e); }
static inline const char *gollm_nccl_error_string(gollm_nccl *b, int r) { return b->error_string(r); }
// ncclSum is 0.
static inline int gollm_nccl_all_reduce_sum(gollm_nccl *b, CUdeviceptr src, CUdeviceptr dst, size_t n, int dt,
		void *c, CUstream s) {
	return b->all_reduce((const void *)src, (void *)dst, n, dt, 0, c, s);
}
static inline int gollm_nccl_all_gather(gollm_nccl *b, CUdeviceptr src, CUdeviceptr dst, size_t n, int dt, void *c,
		CUstream s) {
	return b->all_gather((const void *)src, (void *)dst, n, dt, c, s);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"
)

// ErrNoNCCL is returned by LoadNCCL when no NCCL library could be loaded.
var ErrNoNCCL = errors.New("cuda: NCCL not found")

// ncclLibraries are tried in order after GOLLM_NCCL: by soname (the loader's search path), in CUDA's
// and Debian's folders, then where PyTorch's wheels install it (nvidia-nccl-cu12/13).
var ncclLibraries = []string{
	"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
}

// ncclWheelGlobs are the folders of pip's NCCL, tried last.
var ncclWheelGlobs = []string{
	"/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
}

// NCCL is the loaded NCCL library.
type NCCL struct {
	lib     *C.gollm_nccl
	path    string
	version int
}

// LoadNCCL loads NCCL with dlopen (GOLLM_NCCL names a file to try first). It sets NCCL_NVLS_ENABLE=0 in
// the process environment before any communicator exists: NVLink SHARP (multicast objects) stays off,
// because on shared machines a multicast object left behind can take GPUs out of service, and the
// all-reduces of a decode step are too small to gain from it.
func LoadNCCL() (*NCCL, error) {
	candidates := append([]string(nil), ncclLibraries...)
	for _, g := range ncclWheelGlobs {
		found, _ := filepath.Glob(g)
		candidates = append(candidates, found...)
	}
	if p := os.Getenv("GOLLM_NCCL"); p != "" {
		candidates = append([]string{p}, candidates...)
	}
	if err := os.Setenv("NCCL_NVLS_ENABLE", "0"); err != nil {
		return nil, fmt.Errorf("cuda: NCCL: %w", err)
	}
	handle, path, err := openLibrary(candidates, ErrNoNCCL)
	if err != nil {
		return nil, err
	}
	lib := (*C.gollm_nccl)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gollm_nccl{}))))
	lib.lib = handle
	if missing := C.gollm_nccl_bind(lib); missing != nil {
		C.free(unsafe.Pointer(lib))
		return nil, fmt.Errorf("cuda: %s: missing symbol %s", path, C.GoString(missing))
	}
	n := &NCCL{lib: lib, path: path}
	var v C.int
	if err := n.check("ncclGetVersion", C.gollm_nccl_version(lib, &v)); err != nil {
		return nil, err
	}
	n.version = int(v)
	return n, nil
}

// Library returns the file that was loaded and NCCL's version code (e.g. 22703 for 2.27.3).
func (n *NCCL) Library() (path string, version int) { return n.path, n.version }

// check turns an ncclResult_t into an error naming the call.
func (n *NCCL) check(call string, r C.int) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (NCCL %d)", call, C.GoString(C.gollm_nccl_error_string(n.lib, r)), int(r))
}

// Comm is one rank's NCCL communicator: the rank of devs[Rank] in the group InitAll made.
type Comm struct {
	n          *NCCL
	dev        *Device
	comm       unsafe.Pointer
	rank, size int

	mu      sync.Mutex
	aborted bool
	closed  bool
}

// InitAll creates a communicator for each device of devs, in one process (ncclCommInitAll): rank r
// runs on devs[r]. The devices must be distinct GPUs (NCCL refuses two ranks on one GPU).
func (n *NCCL) InitAll(devs []*Device) ([]*Comm, error) {
	if len(devs) == 0 {
		return nil, errors.New("cuda: NCCL: no devices")
	}
	ordinals := make([]C.int, len(devs))
	seen := map[int]int{}
	for r, d := range devs {
		o := d.Info().Ordinal
		if prev, ok := seen[o]; ok {
			return nil, fmt.Errorf("cuda: NCCL: ranks %d and %d are both on GPU %d", prev, r, o)
		}
		seen[o] = r
		ordinals[r] = C.int(o)
	}
	handles := make([]unsafe.Pointer, len(devs))
	// ncclCommInitAll sets each device current on the calling thread in turn (CUDA's runtime API): run
	// it on a thread of its own, which ends with the call, so that no Device's thread is left with
	// another context current.
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the runtime ends the thread with the goroutine
		cHandles := (*unsafe.Pointer)(C.calloc(C.size_t(len(devs)), C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
		defer C.free(unsafe.Pointer(cHandles))
		cOrd := (*C.int)(C.calloc(C.size_t(len(devs)), C.size_t(unsafe.Sizeof(C.int(0)))))
		defer C.free(unsafe.Pointer(cOrd))
		copy(unsafe.Slice(cOrd, len(devs)), ordinals)
		err := n.check("ncclCommInitAll", C.gollm_nccl_init_all(n.lib, cHandles, C.int(len(devs)), cOrd))
		copy(handles, unsafe.Slice(cHandles, len(devs)))
		done <- err
	}()
	if err := <-done; err != nil {
		return nil, err
	}
	comms := make([]*Comm, len(devs))
	for r := range devs {
		comms[r] = &Comm{n: n, dev: devs[r], comm: handles[r], rank: r, size: len(devs)}
	}
	return comms, nil
}

// Rank is this communicator's rank, Size the group's.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks of the group.
func (c *Comm) Size() int { return c.size }

// ncclType is NCCL's ncclDataType_t of a DataType.
func ncclType(dt DataType) (C.int, error) {
	switch dt {
	case Float32:
		return 7, nil
	case Float16:
		return 6, nil
	case BFloat16:
		return 9, nil
	}
	return 0, fmt.Errorf("cuda: NCCL: element type %d", int(dt))
}

// AllReduceSum queues, on s, the sum over the ranks of count elements of type dt at buf, in place on
// every rank. Every rank must queue the same collectives in the same order; a stream being captured
// records it into its graph. It runs on the communicator's device (Do).
func (c *Comm) AllReduceSum(buf DevicePtr, count int, dt DataType, s *Stream) error {
	return c.enqueue("ncclAllReduce", dt, func(t C.int) C.int {
		return C.gollm_nccl_all_reduce_sum(c.n.lib, C.CUdeviceptr(buf), C.CUdeviceptr(buf), C.size_t(count), t, c.comm,
			cStream(s.handle()))
	})
}

// AllGather queues, on s, the gather of every rank's count elements at src into dst (rank r's at
// element r·count), on every rank.
func (c *Comm) AllGather(dst, src DevicePtr, count int, dt DataType, s *Stream) error {
	return c.enqueue("ncclAllGather", dt, func(t C.int) C.int {
		return C.gollm_nccl_all_gather(c.n.lib, C.CUdeviceptr(src), C.CUdeviceptr(dst), C.size_t(count), t, c.comm,
			cStream(s.handle()))
	})
}

// enqueue makes a collective's call on the communicator's device with dt as NCCL's type, unless the
// communicator is no longer usable.
func (c *Comm) enqueue(call string, dt DataType, f func(t C.int) C.int) error {
	t, err := ncclType(dt)
	if err != nil {
		return err
	}
	return c.dev.Do(func() error {
		if err := c.usable(); err != nil {
			return err
		}
		return c.n.check(call, f(t))
	})
}

// Err reports an aborted or closed communicator, or the asynchronous error NCCL found in its work (the
// collectives a replayed graph ran, which no call returned).
func (c *Comm) Err() error {
	return c.dev.Do(c.usable)
}

// usable reports an aborted or closed communicator, or the asynchronous error NCCL found in its work.
func (c *Comm) usable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted || c.closed {
		return errors.New("cuda: NCCL communicator aborted or closed")
	}
	var e C.int
	if err := c.n.check("ncclCommGetAsyncError", C.gollm_nccl_async_error(c.n.lib, c.comm, &e)); err != nil {
		return err
	}
	return c.n.check("NCCL (asynchronous)", e)
}

// Abort ends the communicator from any goroutine: its collectives queued or running on the GPU stop, so
// that a rank whose peer failed does not wait for it forever. Later calls do nothing; the communicator
// is unusable after it.
func (c *Comm) Abort() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted || c.closed {
		return nil
	}
	c.aborted = true
	return c.n.check("ncclCommAbort", C.gollm_nccl_abort(c.n.lib, c.comm))
}

// Close frees the communicator once its work is done (nothing after Abort, which freed it).
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted || c.closed {
		c.closed = true
		return nil
	}
	c.closed = true
	return c.dev.Do(func() error { return c.n.check("ncclCommDestroy", C.gollm_nccl_destroy(c.n.lib, c.comm)) })
}
