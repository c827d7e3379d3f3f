//go:build !unix

package bench

import "time"

// processCPUTime is unknown on this platform.
func processCPUTime() time.Duration { return -1 }
