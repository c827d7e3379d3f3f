package bench

import (
	"runtime"
	"sync"
	"time"
)

// H100CopyBandwidth is the device-to-device copy bandwidth measured on an H100 SXM (bytes read plus
// written per second; shared/docs/gpu.md): the cuda roofline's figure when the GPU's own cannot be
// measured (ResolveBandwidth).
const H100CopyBandwidth = 3.03e12

// H100MatmulFLOPS is the bf16 matrix rate cuBLAS reached on an H100 SXM (GemmEx, fp32 compute,
// 4096³: 808 TFLOP/s, shared/docs/gpu.md): the default compute roof of the cuda device.
const H100MatmulFLOPS = 808e12

// MeasureCopyBandwidth measures host memory bandwidth the way the GPU's copy bandwidth is quoted: bytes
// read plus bytes written per second by a copy of size bytes, split across GOMAXPROCS goroutines, best
// of reps runs after one warm-up. size should be well beyond the last-level cache (see ProbeBytes); it
// allocates twice size.
func MeasureCopyBandwidth(size, reps int) float64 {
	if size <= 0 || reps <= 0 {
		return 0
	}
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	workers := runtime.GOMAXPROCS(0)
	copyAll := func() {
		var wg sync.WaitGroup
		for w := range workers {
			lo, hi := size*w/workers, size*(w+1)/workers
			wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
		}
		wg.Wait()
	}
	copyAll() // fault the destination's pages in
	best := time.Duration(1<<63 - 1)
	for range reps {
		start := time.Now()
		copyAll()
		best = min(best, time.Since(start))
	}
	return 2 * float64(size) / best.Seconds()
}
