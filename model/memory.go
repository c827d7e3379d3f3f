package model

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/gollm/gollm/weights"
)

// ErrKVTooLarge is wrapped by the errors of Load (and of the backends' constructors) when the KV pool
// asked for (Options.NumBlocks) cannot fit the memory left once the weights are loaded: host memory
// on the CPU backend, free device memory on the GPU. The message says how many pages fit. The check
// runs before the pool is allocated, so that a mistyped --kv-blocks gives an error rather than a
// crash (a slice too large to make, or the runtime's fatal out-of-memory).
var ErrKVTooLarge = errors.New("KV cache does not fit in memory")

// HostMemoryAvailable returns the memory the kernel estimates is available for new allocations
// without swapping (MemAvailable in /proc/meminfo), and false where it cannot be read (not Linux).
func HostMemoryAvailable() (int64, bool) { return meminfo("MemAvailable") }

// meminfo is /proc/meminfo's field name in bytes, and false where it cannot be read.
func meminfo(name string) (int64, bool) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && kb >= 0 {
					return kb << 10, true
				}
			}
		}
	}
	return 0, false
}

// cpuKVBytes is what numBlocks pages cost on the CPU backend (float32 or FP8 K and V over every KV page
// array), and false when that does not fit an int64 or the slices would exceed what Go can allocate.
func cpuKVBytes(s Shape) (int64, bool) {
	elem := int64(KVElementBytes(s.KVCacheDType, 4))
	perLayer := int64(1) // elements of one layer's K (or V)
	for _, d := range []int{s.NumBlocks, s.BlockSize, s.NumKVHeads, s.HeadDim} {
		if d <= 0 || perLayer > math.MaxInt64/int64(d) {
			return 0, false
		}
		perLayer *= int64(d)
	}
	slots := int64(s.NumKVSlots()) // the layers, or fewer where KV groups share page arrays
	if slots <= 0 || perLayer > math.MaxInt/4 || perLayer > math.MaxInt64/(2*elem*slots) {
		return 0, false
	}
	return perLayer * 2 * elem * slots, true
}

// CPUWeightBytes is the host memory the CPU backend's copy of a checkpoint of cfg takes when loaded
// with Options.Quantization quantization: FP8 Linear layers (the checkpoint's, or all but the LM head
// with "fp8") take a byte a parameter and a float32 scale a row, the other matrices of a bfloat16
// checkpoint stay bfloat16, every other parameter becomes float32 (see NewCPUBackend).
func CPUWeightBytes(cfg *weights.Config, quantization string) int64 {
	fp8 := fp8WeightNames(cfg, quantization)
	var total int64
	for name, shape := range weights.TensorShapes(cfg) {
		n := int64(1)
		for _, d := range shape {
			n *= int64(d)
		}
		size := int64(4)
		switch {
		case fp8[name]:
			size = 1
			total += 4 * int64(shape[0])
		case cfg.DType == weights.DTypeBF16 && len(shape) == 2:
			size = 2
		}
		total += n * size
	}
	return total
}

// checkKVFits refuses a pool of s.NumBlocks pages of perBlock bytes where only free bytes of memory
// (named by where, e.g. "host memory", and qualified by after, e.g. " after the weights") are
// available, saying how many pages fit.
func checkKVFits(s Shape, perBlock, free int64, where, after string) error {
	fit := int64(0)
	if free > 0 && perBlock > 0 {
		fit = free / perBlock
	}
	if int64(s.NumBlocks) <= fit {
		return nil
	}
	need := "more than 8 EiB"
	if perBlock > 0 && int64(s.NumBlocks) <= math.MaxInt64/perBlock {
		need = formatBytes(int64(s.NumBlocks) * perBlock)
	}
	return fmt.Errorf("%w: %d pages of %d tokens need %s, but only %s of %s is available%s: at most %d pages fit",
		ErrKVTooLarge, s.NumBlocks, s.BlockSize, need, formatBytes(max(free, 0)), where, after, fit)
}

// checkHostKV checks, before anything is allocated, that the CPU backend's KV pool of s.NumBlocks pages
// and weights of weightBytes fit the host memory available (HostMemoryAvailable); where that cannot be
// read, only that the pool's slices can be made at all.
func checkHostKV(s Shape, weightBytes int64) error {
	one := s
	one.NumBlocks = 1
	perBlock, ok := cpuKVBytes(one)
	if !ok {
		return fmt.Errorf("%w: one page of %d tokens is too large to allocate", ErrKVTooLarge, s.BlockSize)
	}
	if avail, ok := HostMemoryAvailable(); ok {
		after := ""
		if weightBytes > 0 {
			after = fmt.Sprintf(" after the weights (%s)", formatBytes(weightBytes))
		}
		return checkKVFits(s, perBlock, avail-weightBytes, "host memory", after)
	}
	if _, ok := cpuKVBytes(s); !ok {
		return fmt.Errorf("%w: %d pages of %d tokens are more than a slice can hold", ErrKVTooLarge, s.NumBlocks, s.BlockSize)
	}
	return nil
}

// formatBytes writes n in binary units with three significant figures: "512 B", "1.50 GiB".
func formatBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	prec := 2
	switch {
	case v >= 100:
		prec = 0
	case v >= 10:
		prec = 1
	}
	return fmt.Sprintf("%.*f %ciB", prec, v, units[u])
}
