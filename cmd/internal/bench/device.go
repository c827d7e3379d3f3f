package bench

import (
	"fmt"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// Device is where a benchmark runs the model: the model package's device name, what the backend
// stores per weight and per KV element (for the roofline), and which bandwidth the roofline divides by
// unless told.
type Device struct {
	// Name is "cpu" or "cuda", the value of model.Options.Device.
	Name string
	// Precision returns the bytes per weight and per KV element the backend keeps for cfg.
	Precision func(cfg *weights.Config) Precision
	// Bandwidth is a fixed copy bandwidth (bytes read plus written per second) for the roofline; 0 means
	// measure it at start (ResolveBandwidth): MeasureBandwidth when set (the GPU's device-to-device
	// copy), else host memory (MeasureCopyBandwidth).
	Bandwidth float64
	// MeasureBandwidth measures the device's copy bandwidth; nil for the CPU.
	MeasureBandwidth func() (float64, error)
	// PeakFLOPS is the matrix rate of the throughput roofline's compute bound; 0: unknown (none).
	PeakFLOPS float64
}

// DeviceByName returns the named device: "cpu", or "cuda", which fails with an error wrapping
// ErrDeviceUnavailable (and model.ErrNoCUDA) unless this binary was built with the cuda tag and sees a
// GPU.
func DeviceByName(name string) (Device, error) {
	switch name {
	case model.DeviceCPU:
		return Device{Name: model.DeviceCPU, Precision: cpuPrecision}, nil
	case model.DeviceCUDA:
		if _, _, err := model.ResolveDevice(model.DeviceCUDA); err != nil {
			return Device{}, fmt.Errorf("bench: %w: %w", ErrDeviceUnavailable, err)
		}
		return Device{Name: model.DeviceCUDA, Precision: cudaPrecision, MeasureBandwidth: model.CUDACopyBandwidth,
			PeakFLOPS: H100MatmulFLOPS}, nil
	}
	return Device{}, fmt.Errorf("bench: device %q: %w (known: cpu, cuda)", name, ErrDeviceUnavailable)
}

// cpuDevice is the pure-Go backend's Device.
func cpuDevice() Device { d, _ := DeviceByName(model.DeviceCPU); return d }

// cpuPrecision: the CPU backend keeps bfloat16 matrices bfloat16 and turns float16 and float32 ones
// into float32; its KV cache is float32 (model.NewCPUBackend's doc).
func cpuPrecision(cfg *weights.Config) Precision {
	if cfg.DType == weights.DTypeBF16 {
		return Precision{WeightBytes: 2, KVBytes: 4}
	}
	return Precision{WeightBytes: 4, KVBytes: 4}
}

// cudaPrecision: the CUDA backend keeps weight matrices and KV pages in its compute dtype, the
// checkpoint's by default (model.Options.DType).
func cudaPrecision(cfg *weights.Config) Precision {
	size := cfg.DType.Size()
	if size == 0 {
		size = 4
	}
	return Precision{WeightBytes: size, KVBytes: size}
}
