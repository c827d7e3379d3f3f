package model

import (
	"errors"
	"fmt"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/weights"
)

// ErrNoCUDA is wrapped by the errors of Load and ResolveDevice when the CUDA backend is asked for but
// cannot be used: the binary was built without the cuda tag, or no CUDA driver or device was found.
var ErrNoCUDA = errors.New("CUDA not available")

// The devices Options.Device and ResolveDevice name.
const (
	DeviceCPU  = "cpu"  // the pure-Go CPU backend, the reference
	DeviceCUDA = "cuda" // an NVIDIA GPU (binaries built with -tags cuda)
	DeviceAuto = "auto" // the GPU when one can be used, else the CPU
)

// Defaults of the GPU's memory plan (Options.NumBlocks zero).
const (
	// DefaultMemoryUtilization is the share of the GPU's memory the model may fill, as vLLM's
	// gpu_memory_utilization.
	DefaultMemoryUtilization = 0.9
	// DefaultMaxStepTokens and DefaultMaxLogitRows size the activation workspace reserved before the KV
	// pool: the engine's default token budget per step and sequences per step, with room to spare.
	DefaultMaxStepTokens = 8192
	DefaultMaxLogitRows  = 256
)

// ResolveDevice says which device a --device flag value selects: "cpu"; "cuda" (an error wrapping
// ErrNoCUDA when no GPU can be used); "auto" or "" the GPU when the binary was built with the cuda tag and
// a GPU is present, else the CPU, with notice a one-line explanation for the user. The result is a value
// for Options.Device.
func ResolveDevice(name string) (device, notice string, err error) {
	switch name {
	case DeviceCPU:
		return DeviceCPU, "", nil
	case DeviceCUDA:
		if err := cudaUsable(); err != nil {
			return "", "", fmt.Errorf("model: device cuda: %w: %w", ErrNoCUDA, err)
		}
		return DeviceCUDA, "", nil
	case DeviceAuto, "":
		if err := cudaUsable(); err != nil {
			return DeviceCPU, fmt.Sprintf("gollm: running on the CPU (no GPU: %v)", err), nil
		}
		return DeviceCUDA, "", nil
	}
	return "", "", fmt.Errorf("model: unknown device %q (cpu, cuda or auto)", name)
}

// backendFor returns the constructor of the backend opts.Device names for a checkpoint of config cfg,
// and whether that backend is built without its KV pool for load to allocate once the weights are in
// (deferKV: the GPU, whose free memory is known only then; see kvAllocator). Before the CPU backend
// allocates its pool, the pool and the weights are checked against the host memory available.
func backendFor(cfg *weights.Config, opts Options) (newBackend NewBackendFunc, deferKV bool, err error) {
	device := opts.Device
	if device == DeviceAuto {
		device = DeviceCPU
		if cudaUsable() == nil {
			device = DeviceCUDA
		}
	}
	switch opts.SharedPrefix {
	case SharedPrefixAuto, "auto", SharedPrefixOff, SharedPrefixAlways:
	default:
		return nil, false, fmt.Errorf("shared prefix %q (\"\" or \"auto\", %q or %q)", opts.SharedPrefix, SharedPrefixOff, SharedPrefixAlways)
	}
	switch device {
	case "", DeviceCPU:
		weightBytes := CPUWeightBytes(cfg, opts.Quantization)
		return func(s Shape) (Backend, error) {
			if err := checkHostKV(s, weightBytes); err != nil {
				return nil, fmt.Errorf("cpu backend: %w", err)
			}
			b, err := NewCPUBackend(s)
			if err == nil {
				b.(*cpuBackend).sharedPrefix = opts.SharedPrefix
			}
			return b, err
		}, false, nil
	case DeviceCUDA:
		if err := cudaUsable(); err != nil {
			return nil, false, fmt.Errorf("device cuda: %w: %w", ErrNoCUDA, err)
		}
		// Over FP8 pages the GPU's shared-prefix decode has prefix kernels for 16-bit compute at head_dim
		// 64 and 128 alone: elsewhere "always" could not be honoured.
		if kv, _ := parseKVCacheDType(opts.KVCacheDType); kv == KVCacheFP8 && opts.SharedPrefix == SharedPrefixAlways {
			dt, err := computeDTypeFor(cfg, opts)
			if err != nil {
				return nil, false, err
			}
			if !attention.SharedPrefixFP8(attnDTypeOf(dt), headDim(cfg)) {
				return nil, false, fmt.Errorf("shared prefix %q: the GPU's shared-prefix decode reads an FP8 KV cache at head_dim 64 and 128 with 16-bit compute, not head_dim %d in %v (use %q or %q)",
					SharedPrefixAlways, headDim(cfg), dt, "auto", SharedPrefixOff)
			}
		}
		newBackend, err := newCUDABackendFor(cfg, opts)
		return newBackend, opts.NumBlocks > 0, err
	}
	return nil, false, fmt.Errorf("unknown device %q (cpu, cuda or auto)", opts.Device)
}

// attnDTypeOf is the attention package's name of compute dtype dt.
func attnDTypeOf(dt weights.DType) attention.DType {
	switch dt {
	case weights.DTypeBF16:
		return attention.BF16
	case weights.DTypeF16:
		return attention.FP16
	}
	return attention.FP32
}

// computeDTypeFor is the GPU's compute dtype: Options.DType, or the checkpoint's.
func computeDTypeFor(cfg *weights.Config, opts Options) (weights.DType, error) {
	switch opts.DType {
	case "":
		if cfg.DType == weights.DTypeInvalid {
			return weights.DTypeF32, nil
		}
		return cfg.DType, nil
	case "float32", "f32", "fp32":
		return weights.DTypeF32, nil
	case "bfloat16", "bf16":
		return weights.DTypeBF16, nil
	case "float16", "f16", "fp16", "half":
		return weights.DTypeF16, nil
	}
	return weights.DTypeInvalid, fmt.Errorf("options: dtype %q (float32, bfloat16 or float16)", opts.DType)
}

// KVSizer is implemented by backends that size their KV pool from the memory they have left (the CUDA
// backend). When Options.NumBlocks is zero, Load reserves the activation workspace after the weights and
// then calls AllocateKV once; it returns the number of pages per layer it allocated.
type KVSizer interface {
	AllocateKV(utilization float64) (numBlocks int, err error)
}

// kvAllocator is implemented by backends that can be built without a KV pool and given one of a chosen
// size once the weights and the workspace are in place (the CUDA backend): AllocateKVBlocks allocates
// numBlocks pages per layer, or refuses with an error wrapping ErrKVTooLarge, saying how many fit, when
// the memory left cannot hold them.
type kvAllocator interface {
	AllocateKVBlocks(numBlocks int) error
}

// kvCapacitor is implemented by backends that tell how many KV pages the memory left would hold and then
// allocate a number of them (the CUDA backend: KVSizer's two halves), so that the ranks of a
// tensor-parallel model can all take the smallest count.
type kvCapacitor interface {
	kvCapacity(utilization float64) (int, error)
	allocateKV(numBlocks int) error
}

// reserveWorkspace allocates the activation workspace opts asks for (MaxStepTokens, MaxLogitRows).
func (m *Model) reserveWorkspace(opts Options) error {
	tokens, logits := opts.MaxStepTokens, opts.MaxLogitRows
	if tokens <= 0 {
		tokens = DefaultMaxStepTokens
	}
	if logits <= 0 {
		logits = DefaultMaxLogitRows
	}
	return m.ensureWorkspace(tokens, min(logits, tokens))
}

// sizeKV reserves the workspace opts asks for, then lets the backend fill the memory left with KV pages
// (Options.NumBlocks zero), or allocate Options.NumBlocks of them there (deferred, see backendFor).
func (m *Model) sizeKV(opts Options) error {
	sizer, canSize := m.backend.(KVSizer)
	alloc, canAlloc := m.backend.(kvAllocator)
	switch {
	case opts.NumBlocks == 0 && !canSize:
		return errors.New("options: NumBlocks 0 needs a backend that sizes its KV pool (the CUDA backend)")
	case opts.NumBlocks > 0 && !canAlloc:
		return errors.New("options: the backend was built without a KV pool and cannot allocate one")
	}
	if err := m.reserveWorkspace(opts); err != nil {
		return err
	}
	if opts.NumBlocks > 0 {
		if err := alloc.AllocateKVBlocks(opts.NumBlocks); err != nil {
			return fmt.Errorf("KV pool: %w", err)
		}
		m.shape.NumBlocks = opts.NumBlocks
		return nil
	}
	n, err := sizer.AllocateKV(utilizationOf(opts))
	if err != nil {
		return fmt.Errorf("KV pool: %w", err)
	}
	m.shape.NumBlocks = n
	return nil
}

// utilizationOf is opts.MemoryUtilization or its default.
func utilizationOf(opts Options) float64 {
	if opts.MemoryUtilization == 0 {
		return DefaultMemoryUtilization
	}
	return opts.MemoryUtilization
}
