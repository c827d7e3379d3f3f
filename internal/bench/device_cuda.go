//go:build cuda

package bench

import "fmt"

// cudaDevice will construct model's CUDA backend once it exists; until then a cuda build says so.
func cudaDevice() (Device, error) {
	return Device{}, fmt.Errorf("bench: device cuda: %w: the model package has no CUDA backend yet",
		ErrDeviceUnavailable)
}
