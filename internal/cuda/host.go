//go:build cuda

package cuda

/*
#include "gollm_cuda.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// AllocHost allocates n bytes of page-locked host memory, which the asynchronous copies below need to
// stay asynchronous (and which a captured graph may copy from). The memory is outside Go's heap: free it
// with FreeHost, and do not use the slice afterwards.
func (d *Device) AllocHost(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: alloc %d bytes of host memory: size must be positive", n)
	}
	var p unsafe.Pointer
	if err := d.Do(func() error { return check(C.gollm_host_alloc(&p, C.size_t(n))) }); err != nil {
		return nil, fmt.Errorf("cuda: alloc %d bytes of host memory: %w", n, err)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost releases memory from AllocHost. Freeing an empty slice does nothing.
func (d *Device) FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if err := d.Do(func() error { return cu.MemFreeHost(p) }); err != nil {
		return fmt.Errorf("cuda: free host memory: %w", err)
	}
	return nil
}

// CopyToDeviceAsync queues a copy of src to dst on stream s and returns at once. src should be
// page-locked (AllocHost), and must not change until the stream has passed the copy.
func (d *Device) CopyToDeviceAsync(dst DevicePtr, src []byte, s *Stream) error {
	if len(src) == 0 {
		return nil
	}
	err := d.Do(func() error {
		return cu.MemcpyHtoDAsync(cu.DevicePtr(dst), unsafe.Pointer(unsafe.SliceData(src)), int64(len(src)), s.handle())
	})
	if err != nil {
		return fmt.Errorf("cuda: queue a copy of %d bytes to the device: %w", len(src), err)
	}
	return nil
}

// CopyFromDeviceAsync queues a copy of len(dst) bytes from src into dst on stream s and returns at once;
// dst (page-locked, from AllocHost) holds the bytes once the stream has passed the copy.
func (d *Device) CopyFromDeviceAsync(dst []byte, src DevicePtr, s *Stream) error {
	if len(dst) == 0 {
		return nil
	}
	err := d.Do(func() error {
		return cu.MemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), cu.DevicePtr(src), int64(len(dst)), s.handle())
	})
	if err != nil {
		return fmt.Errorf("cuda: queue a copy of %d bytes from the device: %w", len(dst), err)
	}
	return nil
}
