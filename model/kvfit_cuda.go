//go:build cuda

package model

import (
	"errors"
	"fmt"
)

// kvHeadroom is the device memory an explicit KV pool (Options.NumBlocks) must leave free beyond
// itself: cuBLAS's workspace, CUDA graphs, the sampling buffers and the driver's own allocations,
// which come after the pool.
const kvHeadroom = 512 << 20

// AllocateKVBlocks allocates numBlocks KV pages per layer (kvAllocator): Load calls it once the weights
// and the workspace are on the device, so that the pages are checked against the memory really left.
// It refuses, wrapping ErrKVTooLarge and saying how many pages fit, when they would not leave
// kvHeadroom free.
func (b *cudaBackend) AllocateKVBlocks(numBlocks int) error {
	if len(b.kCache) > 0 {
		return errors.New("cuda backend: KV pool already allocated")
	}
	if numBlocks <= 0 {
		return fmt.Errorf("cuda backend: KV pool of %d blocks", numBlocks)
	}
	free, _, err := b.dev.MemInfo()
	if err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	s := b.shape
	s.NumBlocks = numBlocks
	after := fmt.Sprintf(" after the weights and the workspace (keeping %s free)", formatBytes(kvHeadroom))
	if err := checkKVFits(s, b.kvBytesPerBlock(), free-kvHeadroom, "device memory", after); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	return b.allocateKV(numBlocks)
}
