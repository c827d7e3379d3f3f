package bench

import "errors"

// Sentinel errors; test them with errors.Is.
var (
	// ErrUnknownPreset is returned for a --config name that is neither built in nor a file.
	ErrUnknownPreset = errors.New("unknown model shape")
	// ErrDeviceUnavailable is returned for a device this binary cannot drive (cuda without the cuda
	// build tag, or before the CUDA backend exists).
	ErrDeviceUnavailable = errors.New("device unavailable")
	// ErrInvalidOptions is returned for options a driver cannot run (a zero batch, an empty range).
	ErrInvalidOptions = errors.New("invalid benchmark options")
)
