//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPUTime is the CPU time (user plus system) this process has used, or -1 when unknown.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
