// Package cuda is gollm's device layer for NVIDIA GPUs: one CUDA context owned by one goroutine locked to
// its OS thread, device memory, streams and events, modules loaded from embedded fat binaries, kernel
// launches, CUDA graphs captured from a stream, and cuBLAS and cuBLASLt (its e4m3 GEMM) loaded at run time.
//
// Everything except this comment needs the build tag `cuda` (and CUDA's headers and libcuda to build;
// see ../../../shared/docs/gpu.md): a build without the tag has no GPU code and no dependency on CUDA.
//
// The driver API is gorgonia.org/cu; the few calls it lacks (launch with a packed parameter block, with
// programmatic dependent launch or in thread-block clusters, function attributes, stream capture and
// graphs, cuBLAS and cuBLASLt through dlopen, tensor maps for the Hopper copy engine through the driver's
// cuTensorMapEncodeTiled, resolved at run time because cuda.h 11.8 does not declare it) are a little cgo
// of our own.
//
// A CUDA context is current on one OS thread. Open starts a goroutine locked to a thread, makes the
// device's primary context current there and runs every call of a Device on it: the methods hop to that
// goroutine unless the caller is already on it (inside Device.Do), so a caller that needs many calls in a
// row — a decode step, a benchmark loop — wraps them in one Do and pays the hop once.
//
//	dev, err := cuda.Open(0)
//	if err != nil { ... }
//	defer dev.Close()
//	buf, err := dev.Alloc(1 << 20)
//
// A cuda build needs a GPU to start: gorgonia.org/cu calls cuInit in its package init and exits the
// process when that fails, and the binary links libcuda.so.1. A binary that must fall back to the CPU
// on a machine without a GPU cannot import this package (that would take driver bindings of our own,
// loaded with dlopen like cuBLAS here).
//
// This package knows nothing about models or attention: it moves bytes and launches what it is given.
package cuda
