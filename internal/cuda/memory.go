//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// DevicePtr is an address in device memory. The zero value is no memory.
type DevicePtr uintptr

// Add returns p advanced by off bytes.
func (p DevicePtr) Add(off int64) DevicePtr { return DevicePtr(int64(p) + off) }

// Bytes views the elements of s as bytes (for copies of typed host slices); it does not copy.
func Bytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// Alloc allocates n bytes of device memory (uninitialised).
func (d *Device) Alloc(n int64) (DevicePtr, error) {
	var p cu.DevicePtr
	err := d.Do(func() (err error) {
		p, err = cu.MemAlloc(n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: alloc %d bytes: %w", n, err)
	}
	return DevicePtr(p), nil
}

// Free releases memory from Alloc. Freeing the zero pointer does nothing.
func (d *Device) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	if err := d.Do(func() error { return cu.MemFree(cu.DevicePtr(p)) }); err != nil {
		return fmt.Errorf("cuda: free %#x: %w", uintptr(p), err)
	}
	return nil
}

// CopyToDevice copies src to dst and returns when the copy is done.
func (d *Device) CopyToDevice(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	err := d.Do(func() error {
		return cu.MemcpyHtoD(cu.DevicePtr(dst), unsafe.Pointer(unsafe.SliceData(src)), int64(len(src)))
	})
	if err != nil {
		return fmt.Errorf("cuda: copy %d bytes to device: %w", len(src), err)
	}
	return nil
}

// CopyFromDevice copies len(dst) bytes from src to dst and returns when the copy is done (after the work
// queued before it on the legacy default stream).
func (d *Device) CopyFromDevice(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	err := d.Do(func() error {
		return cu.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), cu.DevicePtr(src), int64(len(dst)))
	})
	if err != nil {
		return fmt.Errorf("cuda: copy %d bytes from device: %w", len(dst), err)
	}
	return nil
}

// CopyDevice queues a copy of n bytes from src to dst on stream s (nil: the legacy default stream).
func (d *Device) CopyDevice(dst, src DevicePtr, n int64, s *Stream) error {
	if n == 0 {
		return nil
	}
	err := d.Do(func() error {
		return cu.MemcpyDtoDAsync(cu.DevicePtr(dst), cu.DevicePtr(src), n, s.handle())
	})
	if err != nil {
		return fmt.Errorf("cuda: copy %d bytes on device: %w", n, err)
	}
	return nil
}

// Fill32 queues setting n 32-bit words at dst to value on stream s (nil: the legacy default stream).
// Tests use it to poison outputs (0x7fc00000 is a float32 NaN, 0x7fc07fc0 two bf16 NaNs).
func (d *Device) Fill32(dst DevicePtr, value uint32, n int64, s *Stream) error {
	if n == 0 {
		return nil
	}
	err := d.Do(func() error {
		return cu.MemsetD32Async(cu.DevicePtr(dst), uint(value), n, s.handle())
	})
	if err != nil {
		return fmt.Errorf("cuda: fill %d words: %w", n, err)
	}
	return nil
}

// Buffers owns the device buffers allocated through it and frees them together: a backend's weights and
// workspaces, a benchmark's inputs.
type Buffers struct {
	dev  *Device
	ptrs []DevicePtr
}

// NewBuffers returns an empty set of buffers on d.
func (d *Device) NewBuffers() *Buffers { return &Buffers{dev: d} }

// Alloc allocates n bytes on the device (see Device.Alloc) and keeps them for Free.
func (b *Buffers) Alloc(n int64) (DevicePtr, error) {
	p, err := b.dev.Alloc(n)
	if err == nil {
		b.ptrs = append(b.ptrs, p)
	}
	return p, err
}

// Free releases every buffer allocated through b; b is empty and usable afterwards.
func (b *Buffers) Free() error {
	var errs []error
	for _, p := range b.ptrs {
		errs = append(errs, b.dev.Free(p))
	}
	b.ptrs = nil
	return errors.Join(errs...)
}
