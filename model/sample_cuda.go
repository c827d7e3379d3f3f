//go:build cuda

package model

import (
	"errors"
	"unsafe"
)

// sampleThreads is SampleRows' block (SAMPLE_THREADS in kernels/sample.cu).
const sampleThreads = 1024

// ensureSampleArgs makes the sampler's argument buffers (device and each slot's page-locked one) hold n
// rows. They are not part of any graph, so a new buffer drops none; it waits for the steps in flight.
func (b *cudaBackend) ensureSampleArgs(n int) error {
	if n <= b.sampleCap {
		return nil
	}
	if err := b.quiesce(); err != nil {
		return err
	}
	n = nextPow2(n)
	errs := []error{b.dev.Free(b.sampleArgs)}
	for i := range b.slots {
		errs = append(errs, b.dev.FreeHost(b.slots[i].sample))
		b.slots[i].sample = nil
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	b.sampleArgs, b.sampleCap = 0, 0
	size := n * int(unsafe.Sizeof(sampleRow{}))
	p, err := b.dev.Alloc(int64(size))
	if err != nil {
		return err
	}
	b.sampleArgs = p
	for i := range b.slots {
		if b.slots[i].sample, err = b.dev.AllocHost(size); err != nil {
			return err
		}
	}
	b.sampleCap = n
	return nil
}
