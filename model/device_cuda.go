//go:build cuda

package model

import (
	"fmt"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/weights"
	"gorgonia.org/cu"
)

// cudaBuilt is true in binaries built with the cuda tag.
const cudaBuilt = true

// cudaUsable returns nil when a CUDA GPU can be used, else why not. It only counts devices (no context
// is created).
func cudaUsable() error {
	n, err := cu.NumDevices()
	if err != nil {
		return fmt.Errorf("no CUDA driver or device: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("no CUDA device")
	}
	return nil
}

// newCUDABackendFor returns the constructor of the CUDA backend for a checkpoint of config cfg. It
// builds the backend without its KV pool: Load has it allocated after the weights (sizeKV), where the
// device's free memory tells how many pages fit.
func newCUDABackendFor(cfg *weights.Config, opts Options) (NewBackendFunc, error) {
	dt, err := computeDTypeFor(cfg, opts)
	if err != nil {
		return nil, err
	}
	build := newCUDABackendFunc(cudaConfig{dtype: dt, noGraphs: opts.DisableCUDAGraphs, sharedPrefix: opts.SharedPrefix})
	return func(s Shape) (Backend, error) {
		s.NumBlocks = 0
		return build(s)
	}, nil
}

// CUDACopyBandwidth measures the first GPU's device-to-device copy bandwidth (bytes read plus written per
// second, 1 GiB copies; see cuda.Device.CopyBandwidth): the yardstick of `gollm bench`'s rooflines.
func CUDACopyBandwidth() (float64, error) {
	dev, err := cuda.Open(0)
	if err != nil {
		return 0, err
	}
	defer dev.Close()
	return dev.CopyBandwidth(1 << 30)
}
