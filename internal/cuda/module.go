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

// Module is code loaded into the device's context: a fat binary, cubin or PTX image.
type Module struct {
	dev *Device
	m   cu.Module
}

// LoadModule loads image (usually a fat binary embedded with go:embed). PTX in it is compiled by the
// driver for this device when no matching SASS is present.
func (d *Device) LoadModule(image []byte) (*Module, error) {
	mod := &Module{dev: d}
	err := d.Do(func() (err error) {
		mod.m, err = cu.LoadData(string(image))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: load module (%d bytes): %w", len(image), err)
	}
	return mod, nil
}

// Device is the device the module is loaded on.
func (m *Module) Device() *Device { return m.dev }

// Unload releases the module's code and globals.
func (m *Module) Unload() error {
	if err := m.dev.Do(func() error { return m.m.Unload() }); err != nil {
		return fmt.Errorf("cuda: unload module: %w", err)
	}
	return nil
}

// Function is one kernel of a module.
type Function struct {
	dev  *Device
	name string
	f    cu.Function
}

// Function looks up the kernel named name (an extern "C" entry point).
func (m *Module) Function(name string) (*Function, error) {
	fn := &Function{dev: m.dev, name: name}
	err := m.dev.Do(func() (err error) {
		fn.f, err = m.m.Function(name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: function %q: %w", name, err)
	}
	return fn, nil
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// SetMaxDynamicShared allows launches with up to n bytes of dynamic shared memory (above 48 KiB a kernel
// must ask; Info.SharedPerBlockOptin is the most it may ask for).
func (f *Function) SetMaxDynamicShared(n int) error {
	err := f.dev.Do(func() error { return check(C.gollm_set_max_dynamic_shared(cFunction(f.f), C.int(n))) })
	if err != nil {
		return fmt.Errorf("cuda: %s: set max dynamic shared memory %d: %w", f.name, n, err)
	}
	return nil
}

// FuncAttributes are the compiler's resource report for a kernel, read from the loaded module.
type FuncAttributes struct {
	Registers, StaticShared, LocalBytes, MaxThreads, BinaryVersion int
}

// Attributes reads the kernel's registers per thread, static shared memory, local memory (spills and
// stack) per thread, largest block, and the SASS version it runs.
func (f *Function) Attributes() (FuncAttributes, error) {
	var a FuncAttributes
	err := f.dev.Do(func() error {
		for _, x := range []struct {
			dst  *int
			attr C.int
		}{
			{&a.Registers, C.CU_FUNC_ATTRIBUTE_NUM_REGS},
			{&a.StaticShared, C.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES},
			{&a.LocalBytes, C.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES},
			{&a.MaxThreads, C.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
			{&a.BinaryVersion, C.CU_FUNC_ATTRIBUTE_BINARY_VERSION},
		} {
			var v C.int
			if err := check(C.gollm_func_attr(cFunction(f.f), x.attr, &v)); err != nil {
				return err
			}
			*x.dst = int(v)
		}
		return nil
	})
	if err != nil {
		return a, fmt.Errorf("cuda: %s: attributes: %w", f.name, err)
	}
	return a, nil
}

// Occupancy returns how many blocks of block threads with shared bytes of dynamic shared memory fit on
// one SM at once.
func (f *Function) Occupancy(block, shared int) (int, error) {
	var n C.int
	err := f.dev.Do(func() error {
		return check(C.gollm_occupancy(cFunction(f.f), C.int(block), C.size_t(shared), &n))
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: %s: occupancy: %w", f.name, err)
	}
	return int(n), nil
}

// Dim3 is a grid or block size; zero components count as 1.
type Dim3 struct{ X, Y, Z int }

func (d Dim3) c() (C.uint, C.uint, C.uint) {
	one := func(v int) C.uint { return C.uint(max(v, 1)) }
	return one(d.X), one(d.Y), one(d.Z)
}

// Launch queues f on stream s (nil: the legacy default stream) with grid × block threads, shared bytes
// of dynamic shared memory and params as its one by-value parameter: params points to a struct with the
// same layout as the kernel's parameter struct and holding no Go pointers (device addresses are
// DevicePtr). The driver copies it before Launch returns.
func Launch[P any](f *Function, grid, block Dim3, shared int, s *Stream, params *P) error {
	gx, gy, gz := grid.c()
	bx, by, bz := block.c()
	err := f.dev.Do(func() error {
		return check(C.gollm_launch(cFunction(f.f), gx, gy, gz, bx, by, bz, C.uint(shared),
			cStream(s.handle()), unsafe.Pointer(params)))
	})
	if err != nil {
		return fmt.Errorf("cuda: launch %s grid %v block %v shared %d: %w", f.name, grid, block, shared, err)
	}
	return nil
}

// LaunchPDL is Launch with programmatic dependent launch (compute capability 9.0 and newer): f may start
// while the kernel queued before it on s is still running, so f must wait for that kernel itself (PTX
// griddepcontrol.wait) before it reads what that kernel wrote or writes what it reads. A kernel that does
// not wait must be launched with Launch. Streams captured into graphs keep the relaxed dependency.
func LaunchPDL[P any](f *Function, grid, block Dim3, shared int, s *Stream, params *P) error {
	return launchEx(f, grid, block, Dim3{}, shared, s, true, params)
}

// LaunchCluster is Launch (LaunchPDL when pdl) with the grid in thread-block clusters of shape cluster
// (compute capability 9.0 and newer; each grid dimension a multiple of the cluster's): the blocks of a
// cluster run at once on one GPU processing cluster and may read each other's shared memory.
func LaunchCluster[P any](f *Function, grid, block, cluster Dim3, shared int, s *Stream, pdl bool, params *P) error {
	if cluster.X < 1 {
		cluster.X = 1
	}
	return launchEx(f, grid, block, cluster, shared, s, pdl, params)
}

func launchEx[P any](f *Function, grid, block, cluster Dim3, shared int, s *Stream, pdl bool, params *P) error {
	gx, gy, gz := grid.c()
	bx, by, bz := block.c()
	var cx, cy, cz C.uint // zero: no cluster attribute
	if cluster.X > 0 {
		cx, cy, cz = cluster.c()
	}
	p := C.int(0)
	if pdl {
		p = 1
	}
	err := f.dev.Do(func() error {
		return check(C.gollm_launch_ex(cFunction(f.f), gx, gy, gz, bx, by, bz, C.uint(shared),
			cStream(s.handle()), unsafe.Pointer(params), p, cx, cy, cz))
	})
	if err != nil {
		return fmt.Errorf("cuda: launch %s grid %v block %v cluster %v shared %d (dependent %v): %w", f.name, grid, block,
			cluster, shared, pdl, err)
	}
	return nil
}

// Global returns the address and size of the module's global variable name (a __device__ variable).
func (m *Module) Global(name string) (DevicePtr, int64, error) {
	var p DevicePtr
	var n int64
	err := m.dev.Do(func() error {
		ptr, size, err := m.m.Global(name)
		p, n = DevicePtr(ptr), size
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: global %q: %w", name, err)
	}
	return p, n, nil
}

// Int32 reads the module's __device__ int name: a constant the kernel file computes for its host, such as
// a kernel's shared memory from the constants of its layout.
func (m *Module) Int32(name string) (int32, error) {
	p, n, err := m.Global(name)
	if err != nil {
		return 0, err
	}
	if n != 4 {
		return 0, fmt.Errorf("cuda: global %q: %d bytes, want an int's 4", name, n)
	}
	var v [1]int32
	if err := m.dev.CopyFromDevice(Bytes(v[:]), p); err != nil {
		return 0, fmt.Errorf("cuda: global %q: %w", name, err)
	}
	return v[0], nil
}
