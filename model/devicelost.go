package model

import (
	"errors"
	"fmt"
)

// ErrDeviceLost is wrapped by the errors of Forward, Start and Pick.Wait when the device can run
// nothing any more: on the GPU, a "sticky" CUDA error (a kernel that faulted, a failed launch, an
// uncorrectable ECC error) has left its context unusable, and every later step would fail the same way
// until the process restarts. Other errors of a step (out of memory, say) fail that step only.
var ErrDeviceLost = errors.New("device lost")

// classifyStepError wraps err, an error of a step, in ErrDeviceLost when the backend's device is gone
// for good (deviceLost).
func classifyStepError(err error) error {
	if err == nil || errors.Is(err, ErrDeviceLost) || !deviceLost(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrDeviceLost, err)
}
