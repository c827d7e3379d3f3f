//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
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
	// PeakMemBandwidth is the memory's peak bandwidth in bytes/s (2 × memory clock × bus width, by the
	// driver's attributes: 3.35e12 on the H100 SXM, 4.81e12 on the H200), 0 where the driver gives none.
	PeakMemBandwidth float64
	// DriverVersion is the CUDA driver's version, e.g. 13000 for 13.0.
	DriverVersion int
}

// Device is one GPU with its primary context. Its methods may be called from any goroutine; they run one
// at a time, with the context current on the caller's OS thread (see Do).
type Device struct {
	info Info
	dev  cu.Device
	ctx  cu.CUContext

	// mu serializes the calls; holder is the OS thread of the call under way (0: none), so that a call
	// made from inside one runs directly.
	mu     sync.Mutex
	holder atomic.Int64

	closeOnce sync.Once
	closed    chan struct{}
	exited    chan struct{}
}

// Open retains the primary context of GPU ordinal (held by a goroutine locked to its OS thread until
// Close) and returns the Device that runs work in it.
func Open(ordinal int) (*Device, error) {
	d := &Device{
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

// own retains the context on a locked thread, reads the device's facts, and releases the context at
// Close.
func (d *Device) own(ordinal int, ready chan<- error) {
	// The thread stays locked for the goroutine's life; when the goroutine returns still locked, the
	// runtime ends the thread.
	runtime.LockOSThread()
	defer close(d.exited)
	if err := d.bind(ordinal); err != nil {
		ready <- err
		return
	}
	ready <- nil
	<-d.closed
	_ = d.dev.ReleasePrimaryCtx()
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
	d.dev, d.ctx = dev, ctx
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
	// Informational (a heuristic's input): a driver that no longer reports these leaves 0, not an error.
	clockKHz, errClock := dev.Attribute(cu.MemoryClockRate)
	busBits, errBus := dev.Attribute(cu.GlobalMemoryBusWidth)
	if errClock == nil && errBus == nil && clockKHz > 0 && busBits > 0 {
		info.PeakMemBandwidth = 2 * float64(clockKHz) * 1e3 * float64(busBits) / 8
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
	err := ErrClosed
	d.closeOnce.Do(func() {
		err = d.Do(func() error {
			err := cu.Synchronize()
			close(d.closed) // under the lock: every later call sees it
			return err
		})
		<-d.exited
	})
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// Do runs f with the device's context current and returns its error: on the calling goroutine, its OS
// thread locked for the call, one call at a time. Inside f, the Device's methods run directly, so a
// sequence of calls costs one lock. f must not call Do of another Device.
//
// Running on the caller's thread (cuCtxSetCurrent is cheap) rather than handing f to a goroutine that owns
// the context saves two goroutine wake-ups a call, which a decode step of a small model felt.
func (d *Device) Do(f func() error) error {
	if d.holder.Load() == int64(syscall.Gettid()) {
		return f() // called from inside f: only the holder runs on its locked thread
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.closed:
		return ErrClosed
	default:
	}
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("cuda: set current context: %w", err)
	}
	d.holder.Store(int64(syscall.Gettid()))
	defer d.holder.Store(0)
	return f()
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
