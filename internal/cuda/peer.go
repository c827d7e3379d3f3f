//go:build cuda

package cuda

/*
#include "gollm_cuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// CanAccessPeer reports whether kernels on d's GPU can read and write memory of peer's GPU directly
// (NVLink or PCIe peer-to-peer); a GPU can always reach its own memory.
func (d *Device) CanAccessPeer(peer *Device) (bool, error) {
	if d.info.Ordinal == peer.info.Ordinal {
		return true, nil
	}
	var can int
	err := d.Do(func() (err error) {
		can, err = d.dev.CanAccessPeer(peer.dev)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("cuda: can GPU %d access GPU %d: %w", d.info.Ordinal, peer.info.Ordinal, err)
	}
	return can != 0, nil
}

// EnablePeerAccess lets kernels in d's context use addresses of peer's device memory (cuCtxEnablePeerAccess);
// it does nothing when both are the same GPU or access is already on. It fails when the GPUs have no
// peer-to-peer path.
func (d *Device) EnablePeerAccess(peer *Device) error {
	if d.info.Ordinal == peer.info.Ordinal {
		return nil
	}
	ok, err := d.CanAccessPeer(peer)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("cuda: GPU %d cannot access GPU %d's memory (no peer-to-peer path)", d.info.Ordinal, peer.info.Ordinal)
	}
	err = d.Do(func() error {
		err := peer.ctx.EnablePeerAccess(0)
		if errors.Is(err, cu.PeerAccessAlreadyEnabled) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("cuda: enable GPU %d's access to GPU %d: %w", d.info.Ordinal, peer.info.Ordinal, err)
	}
	return nil
}

// AllocHostMapped allocates n bytes of page-locked host memory that kernels on every GPU of the process
// read and write (portable and mapped), zeroed, and returns it with its device address (with unified
// addressing the same on every GPU). Kernels and the host share it without copies: words a kernel
// polls while the host may set them. Free it with FreeHost.
func (d *Device) AllocHostMapped(n int) ([]byte, DevicePtr, error) {
	if n <= 0 {
		return nil, 0, fmt.Errorf("cuda: alloc %d bytes of mapped host memory: size must be positive", n)
	}
	var p unsafe.Pointer
	var dp C.CUdeviceptr
	if err := d.Do(func() error { return check(C.gollm_host_alloc_mapped(&p, &dp, C.size_t(n))) }); err != nil {
		return nil, 0, fmt.Errorf("cuda: alloc %d bytes of mapped host memory: %w", n, err)
	}
	b := unsafe.Slice((*byte)(p), n)
	clear(b)
	return b, DevicePtr(dp), nil
}
