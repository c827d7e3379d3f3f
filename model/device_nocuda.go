//go:build !cuda

package model

import (
	"errors"
	"fmt"

	"github.com/gollm/gollm/model/tp"
	"github.com/gollm/gollm/weights"
)

// cudaBuilt is true in binaries built with the cuda tag.
const cudaBuilt = false

// errNotBuiltWithCUDA says why a build without the cuda tag has no GPU backend.
var errNotBuiltWithCUDA = errors.New("built without the cuda tag (go build -tags cuda)")

func cudaUsable() error { return errNotBuiltWithCUDA }

func newCUDABackendFor(*weights.Config, Options) (NewBackendFunc, error) {
	return nil, errNotBuiltWithCUDA
}

// CUDACopyBandwidth measures the GPU's copy bandwidth; without the cuda tag there is none.
func CUDACopyBandwidth() (float64, error) { return 0, errNotBuiltWithCUDA }

func newCUDAGroup(*weights.Config, Options, []tp.Communicator) (*rankGroup, error) {
	return nil, fmt.Errorf("device cuda: %w: %w", ErrNoCUDA, errNotBuiltWithCUDA)
}
