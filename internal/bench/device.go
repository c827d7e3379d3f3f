package bench

import (
	"fmt"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// Device is where a benchmark runs the model: how to build the backend, what it stores per weight and
// per KV element (for the roofline), and which bandwidth the roofline divides by unless told.
type Device struct {
	// Name is "cpu" or "cuda".
	Name string
	// NewBackend constructs the backend for a model shape.
	NewBackend model.NewBackendFunc
	// Precision returns the bytes per weight and per KV element the backend keeps for cfg.
	Precision func(cfg *weights.Config) Precision
	// Bandwidth is the copy bandwidth (bytes read plus written per second) of the roofline; 0 means
	// measure it at start (MeasureCopyBandwidth), as for host memory.
	Bandwidth float64
}

// DeviceNames are the names DeviceByName knows (not all of them work in every build).
var DeviceNames = []string{"cpu", "cuda"}

// DeviceByName returns the named device. "cuda" fails with ErrDeviceUnavailable unless this binary was
// built with the cuda tag and has a CUDA backend.
func DeviceByName(name string) (Device, error) {
	switch name {
	case "cpu":
		return cpuDevice(), nil
	case "cuda":
		return cudaDevice()
	}
	return Device{}, fmt.Errorf("bench: device %q: %w (known: cpu, cuda)", name, ErrDeviceUnavailable)
}

// cpuDevice is the pure-Go backend: bfloat16 matrices stay bfloat16, float16 and float32 ones become
// float32, and the KV cache is float32 (model.NewCPUBackend's doc).
func cpuDevice() Device {
	return Device{
		Name:       "cpu",
		NewBackend: model.NewCPUBackend,
		Precision: func(cfg *weights.Config) Precision {
			if cfg.DType == weights.DTypeBF16 {
				return Precision{WeightBytes: 2, KVBytes: 4}
			}
			return Precision{WeightBytes: 4, KVBytes: 4}
		},
	}
}
