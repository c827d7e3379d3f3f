//go:build cuda

package model

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
)

// sampleThreads is SampleRows' block (SAMPLE_THREADS in kernels/sample.cu).
const sampleThreads = 1024

// SampleToHost runs the step and writes into dst[r] the token drawn from src's row r under params[r]
// (kernels/sample.cu, the twin of sampleRowCPU): only the rows' arguments go to the device and
// len(dst) int32 come back. The forward part of the step runs as usual (a CUDA graph where it can);
// the sampling kernel follows it on the stream, outside the graph, since its arguments change every step.
func (b *cudaBackend) SampleToHost(dst []int32, src Tensor, params []SampleParams) error {
	if len(dst) == 0 {
		return b.run(nil)
	}
	if len(params) != len(dst) {
		return fmt.Errorf("cuda backend: %d sampling parameters for %d rows", len(params), len(dst))
	}
	t := tensorOf(src)
	if len(dst) > src.Rows {
		return fmt.Errorf("cuda backend: sample %d rows of a %d-row tensor", len(dst), src.Rows)
	}
	rows := make([]sampleRow, len(dst))
	for i, p := range params {
		rows[i] = prepareSample(p)
	}
	if err := b.ensureIDs(max(len(dst), b.st.rows)); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	if err := b.ensureSampleArgs(len(dst)); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	ids := b.pinIDs[:4*len(dst)]
	args := b.pinSample[:len(rows)*int(unsafe.Sizeof(sampleRow{}))]
	return b.run(func() error {
		copy(args, cuda.Bytes(rows))
		if err := b.dev.CopyToDeviceAsync(b.sampleArgs, args, b.stream); err != nil {
			return err
		}
		p := struct {
			Out, Kept, Logits, Args cuda.DevicePtr
			Cols                    int32
		}{b.ids, b.sampleKept, t.ptr, b.sampleArgs, int32(src.Cols)}
		if err := cuda.Launch(b.fn.sample, cuda.Dim3{X: len(dst)}, cuda.Dim3{X: sampleThreads}, 0, b.stream, &p); err != nil {
			return err
		}
		if err := b.dev.CopyFromDeviceAsync(ids, b.ids, b.stream); err != nil {
			return err
		}
		if err := b.stream.Synchronize(); err != nil {
			return err
		}
		copy(cuda.Bytes(dst), ids)
		return nil
	})
}

// ensureSampleArgs makes the sampler's argument buffers (device and page-locked) hold n rows. They are
// not part of any graph, so a new buffer drops none.
func (b *cudaBackend) ensureSampleArgs(n int) error {
	if n <= b.sampleCap {
		return nil
	}
	n = nextPow2(n)
	if err := errors.Join(b.dev.Free(b.sampleArgs), b.dev.FreeHost(b.pinSample)); err != nil {
		return err
	}
	b.sampleArgs, b.pinSample, b.sampleCap = 0, nil, 0
	size := n * int(unsafe.Sizeof(sampleRow{}))
	p, err := b.dev.Alloc(int64(size))
	if err != nil {
		return err
	}
	b.sampleArgs = p
	if b.pinSample, err = b.dev.AllocHost(size); err != nil {
		return err
	}
	b.sampleCap = n
	return nil
}
