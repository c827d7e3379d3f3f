//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"

	"gorgonia.org/cu"
)

// ErrClosed is returned by the methods of a Device after Close.
var ErrClosed = errors.New("cuda: device closed")

// Info holds the facts about a device that kernels and planners size themselves by.
type Info struct {
	Ordinal int
	Name    string
	// Major and Minor are the compute capability (9, 0 for the H100).
	Major, Minor int
	// NumSMs is the number of streaming multiprocessors.
	NumSMs int
	// L2Bytes is the size of the L2 cache.
	L2Bytes int
	// SharedPerBlockOptin is the most shared memory one block may ask for after raising its limit
	// (Function.SetMaxDynamicShared); SharedPerSM is the shared memory of one SM.
	SharedPerBlockOptin, SharedPerSM int
	// TotalMem is the device memory in bytes.
	TotalMem int64
	// DriverVersion is the CUDA driver's version, e.g. 13000 for 13.0.
	DriverVersion int
}

// Device is one GPU with its primary context, owned by one goroutine locked to its OS thread. Its methods
// may be called from any goroutine; they run on the owner goroutine.
type Device struct {
	info  Info
	dev   cu.Device
	ctx   cu.CUContext
	tid   int // the owner goroutine's OS thread
	calls chan func()

	closeOnce sync.Once
	closed    chan struct{}
	exited    chan struct{}
}

// Open makes the primary context of GPU ordinal current on a new goroutine locked to its OS thread and
// returns the Device that runs work there.
func Open(ordinal int) (*Device, error) {
	d := &Device{
		calls:  make(chan func()),
		closed: make(chan struct{}),
		exited: make(chan struct{}),
	}
	ready := make(chan error, 1)
	go d.own(ordinal, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

// own is the owner goroutine: it binds the context to its thread, then runs calls until Close.
func (d *Device) own(ordinal int, ready chan<- error) {
	// The thread stays locked for the goroutine's life; when the goroutine returns still locked, the
	// runtime ends the thread, so no other goroutine ever inherits the context binding.
	runtime.LockOSThread()
	defer close(d.exited)
	if err := d.bind(ordinal); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for {
		select {
		case f := <-d.calls:
			f()
		case <-d.closed:
			_ = d.dev.ReleasePrimaryCtx()
			return
		}
	}
}

func (d *Device) bind(ordinal int) error {
	n, err := cu.NumDevices()
	if err != nil {
		return fmt.Errorf("cuda: count devices: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return fmt.Errorf("cuda: device %d of %d: %w", ordinal, n, cu.InvalidDevice)
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return fmt.Errorf("cuda: device %d: retain primary context: %w", ordinal, err)
	}
	if err := cu.SetCurrentContext(ctx); err != nil {
		_ = dev.ReleasePrimaryCtx()
		return fmt.Errorf("cuda: device %d: set current context: %w", ordinal, err)
	}
	d.dev, d.ctx, d.tid = dev, ctx, syscall.Gettid()
	info := Info{Ordinal: ordinal, DriverVersion: cu.Version()}
	if info.Name, err = dev.Name(); err != nil {
		return fmt.Errorf("cuda: device %d: name: %w", ordinal, err)
	}
	attrs := []struct {
		dst  *int
		attr cu.DeviceAttribute
	}{
		{&info.Major, cu.ComputeCapabilityMajor},
		{&info.Minor, cu.ComputeCapabilityMinor},
		{&info.NumSMs, cu.MultiprocessorCount},
		{&info.L2Bytes, cu.L2CacheSize},
		{&info.SharedPerSM, cu.MaxSharedMemoryPerMultiprocessor},
		{&info.SharedPerBlockOptin, maxSharedPerBlockOptin},
	}
	for _, a := range attrs {
		if *a.dst, err = dev.Attribute(a.attr); err != nil {
			return fmt.Errorf("cuda: device %d: attribute %d: %w", ordinal, a.attr, err)
		}
	}
	if info.TotalMem, err = dev.TotalMem(); err != nil {
		return fmt.Errorf("cuda: device %d: total memory: %w", ordinal, err)
	}
	d.info = info
	return nil
}

// Info returns the device's facts, read once at Open.
func (d *Device) Info() Info { return d.info }

// Close waits for the device's work to finish, releases the context and ends the owner goroutine. Memory,
// modules, streams and events not freed before are released with the context. Close is idempotent.
func (d *Device) Close() error {
	var err error
	d.closeOnce.Do(func() {
		err = d.Do(func() error { return cu.Synchronize() })
		close(d.closed)
		<-d.exited
	})
	return err
}

// Do runs f on the goroutine that owns the context and returns its error. Inside f, the Device's methods
// run directly (no hop), so a sequence of calls costs one hop. f must not call Do of another Device.
func (d *Device) Do(f func() error) error {
	if syscall.Gettid() == d.tid {
		return f() // already on the owner: only the owner goroutine runs on its locked thread
	}
	done := make(chan error, 1)
	select {
	case d.calls <- func() { done <- f() }:
		return <-done
	case <-d.closed:
		return ErrClosed
	}
}

// Synchronize blocks until all work queued on the device has finished.
func (d *Device) Synchronize() error {
	return d.Do(func() error {
		if err := cu.Synchronize(); err != nil {
			return fmt.Errorf("cuda: synchronize: %w", err)
		}
		return nil
	})
}

// MemInfo returns the free and total device memory in bytes.
func (d *Device) MemInfo() (free, total int64, err error) {
	err = d.Do(func() error {
		free, total, err = cu.MemInfo()
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: memory info: %w", err)
	}
	return free, total, nil
}
