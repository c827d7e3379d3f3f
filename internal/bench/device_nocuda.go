//go:build !cuda

package bench

import "fmt"

// cudaDevice is unavailable in a build without the cuda tag.
func cudaDevice() (Device, error) {
	return Device{}, fmt.Errorf("bench: device cuda: %w: this binary was built without CUDA (build with -tags cuda)",
		ErrDeviceUnavailable)
}
