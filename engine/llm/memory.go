package llm

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// minKVTokens is the least the CPU's KV cache holds when Config.MaxModelLen does not say: the model's
// whole context, up to this many tokens.
const minKVTokens = 8192

// cpuKVBlocks sizes the KV cache on the CPU from the host memory available: a quarter of what is left
// once the weights are loaded (model.CPUWeightBytes: the CPU backend keeps bfloat16 matrices as they
// are, FP8 ones in a byte a parameter, and the rest as float32; quantization is Config.Quantization),
// pages of kvCacheDType (Config.KVCacheDType: float32, or FP8 at a quarter of the bytes), and no more
// than maxNumSeqs full contexts need (a context is maxModelLen tokens, or max_position_embeddings when
// maxModelLen is 0), but at least one context: the one asked for (maxModelLen), else the model's up to
// minKVTokens. A long-context model (128K, 1M tokens) on a machine that cannot hold a whole context gets
// what fits, and the engine caps its requests' length to that. When the weights and that one context do
// not fit in what is available, it returns an error wrapping ErrDoesNotFit.
func cpuKVBlocks(cfg *weights.Config, pageSize, maxNumSeqs, maxModelLen int, available int64, quantization, kvCacheDType string) (int, error) {
	perBlock := int64(model.KVBytesPerBlock(cfg, pageSize, kvCacheDType))
	context := int64(cfg.MaxPositionEmbeddings)
	if maxModelLen > 0 {
		context = min(context, int64(maxModelLen))
	}
	// A sequence takes a block of every KV group per page when it is admitted (fewer once a sliding
	// group's window moves on).
	groups := int64(len(model.KVLayoutOf(cfg).Windows))
	perSeq := groups * ((context + int64(pageSize) - 1) / int64(pageSize))
	least := min(perSeq, groups*((minKVTokens+int64(pageSize)-1)/int64(pageSize)))
	if maxModelLen > 0 {
		least = perSeq
	}
	weightBytes := model.CPUWeightBytes(cfg, quantization)
	if need := weightBytes + least*perBlock; available < need {
		return 0, fmt.Errorf("llm: the weights (%s on the CPU) and a KV cache of %d tokens (%s) need %s of memory; %s is available (%s): %w",
			bytesString(weightBytes), least*int64(pageSize), bytesString(least*perBlock), bytesString(need), bytesString(available),
			fitHint(weightBytes, available, quantization, kvCacheDType), ErrDoesNotFit)
	}
	blocks := (available - weightBytes) / 4 / perBlock
	blocks = min(blocks, perSeq*int64(max(maxNumSeqs, 1)), 1<<20)
	return int(max(blocks, least)), nil
}

// fitHint says what makes a model of weightBytes on the CPU fit in available bytes of memory, under
// Config.Quantization quantization and Config.KVCacheDType kvCacheDType.
func fitHint(weightBytes, available int64, quantization, kvCacheDType string) string {
	switch {
	case weightBytes >= available && quantization != "fp8":
		return `the weights alone do not fit: Quantization "fp8" stores their matrices in a byte a parameter`
	case weightBytes >= available:
		return "the weights alone do not fit: free memory or take a smaller model"
	case kvCacheDType != "fp8":
		return `a smaller MaxModelLen, or KVCacheDType "fp8", needs a smaller KV cache`
	}
	return "a smaller MaxModelLen needs a smaller KV cache"
}

// availableMemory returns MemAvailable from /proc/meminfo, or 4 GiB where it cannot be read.
func availableMemory() int64 {
	const fallback = 4 << 30
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return fallback
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return fallback
}

// bytesString writes n bytes in binary units (KiB, MiB, GiB).
func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
