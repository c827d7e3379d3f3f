// C helpers for package cuda: the driver calls gorgonia.org/cu does not wrap. Included by the Go files
// of the package (static inline, so each cgo preamble gets its own copy).
#ifndef GOLLM_CUDA_H
#define GOLLM_CUDA_H
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

// GOLLM_BIND resolves symbol name of the dlopened library b->lib into b->field (of function pointer type
// type), or returns name from the binding function: the libraries loaded at run time (cuBLASLt, NCCL)
// list their symbols with it.
#define GOLLM_BIND(field, type, name) if (!(b->field = (type)dlsym(b->lib, name))) return name;
// gollm_launch launches f with one by-value parameter block: every kernel of ours takes a single struct,
// and args points to its bytes (laid out by the Go struct that mirrors it).
static inline CUresult gollm_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s, void *args) {
	void *params[1] = { args };
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL);
}

// gollm_launch_ex is gollm_launch with launch attributes: pdl allows programmatic dependent launch
// (compute capability 9.0: the kernel may start before the previous kernel on the stream has finished,
// and must wait for it itself, griddepcontrol.wait, before it touches what that kernel wrote); cx, cy, cz
// above zero launch the grid in thread-block clusters of that shape (compute capability 9.0).
static inline CUresult gollm_launch_ex(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s, void *args,
		int pdl, unsigned cx, unsigned cy, unsigned cz) {
	void *params[1] = { args };
	CUlaunchAttribute attrs[2];
	memset(attrs, 0, sizeof attrs);
	unsigned n = 0;
	if (pdl) {
		attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
		attrs[n].value.programmaticStreamSerializationAllowed = 1;
		n++;
	}
	if (cx > 0) {
		attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		attrs[n].value.clusterDim.x = cx;
		attrs[n].value.clusterDim.y = cy;
		attrs[n].value.clusterDim.z = cz;
		n++;
	}
	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.gridDimX = gx;
	cfg.gridDimY = gy;
	cfg.gridDimZ = gz;
	cfg.blockDimX = bx;
	cfg.blockDimY = by;
	cfg.blockDimZ = bz;
	cfg.sharedMemBytes = smem;
	cfg.hStream = s;
	cfg.attrs = attrs;
	cfg.numAttrs = n;
	return cuLaunchKernelEx(&cfg, f, params, NULL);
}

static inline CUresult gollm_set_max_dynamic_shared(CUfunction f, int bytes) {
	return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

static inline CUresult gollm_func_attr(CUfunction f, int attr, int *v) {
	return cuFuncGetAttribute(v, (CUfunction_attribute)attr, f);
}

static inline CUresult gollm_occupancy(CUfunction f, int block, size_t smem, int *n) {
	return cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, smem);
}

static inline CUresult gollm_begin_capture(CUstream s) {
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}

static inline CUresult gollm_end_capture(CUstream s, CUgraph *g) {
	return cuStreamEndCapture(s, g);
}

// gollm_capturing sets *on to whether s is being captured into a graph.
static inline CUresult gollm_capturing(CUstream s, int *on) {
	CUstreamCaptureStatus st;
	CUresult r = cuStreamIsCapturing(s, &st);
	*on = r == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
	return r;
}

static inline CUresult gollm_instantiate(CUgraphExec *e, CUgraph g) {
	return cuGraphInstantiateWithFlags(e, g, 0);
}

static inline CUresult gollm_graph_launch(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
static inline CUresult gollm_graph_exec_destroy(CUgraphExec e) { return cuGraphExecDestroy(e); }
static inline CUresult gollm_graph_destroy(CUgraph g) { return cuGraphDestroy(g); }
static inline CUresult gollm_graph_nodes(CUgraph g, size_t *n) { return cuGraphGetNodes(g, NULL, n); }

// gollm_host_alloc allocates n bytes of page-locked host memory (asynchronous copies need it).
static inline CUresult gollm_host_alloc(void **p, size_t n) { return cuMemHostAlloc(p, n, 0); }

// gollm_host_alloc_mapped allocates n bytes of page-locked host memory that kernels of every context read
// and write (portable, mapped), and its address on the device of the current context.
static inline CUresult gollm_host_alloc_mapped(void **p, CUdeviceptr *dp, size_t n) {
	CUresult r = cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
	if (r != CUDA_SUCCESS) return r;
	r = cuMemHostGetDevicePointer(dp, *p, 0);
	if (r != CUDA_SUCCESS) {
		cuMemFreeHost(*p);
		*p = NULL;
	}
	return r;
}

static inline const char *gollm_error_name(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN";
	return s;
}
#endif
