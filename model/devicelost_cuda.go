//go:build cuda

package model

import "github.com/gollm/gollm/internal/cuda"

// deviceLost reports whether err, from the CUDA backend, holds a driver error that leaves the context
// unusable (cuda.IsContextLost).
func deviceLost(err error) bool { return cuda.IsContextLost(err) }
