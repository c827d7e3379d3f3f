package attention

import (
	"runtime"
)

// defaultWorkers is the number of goroutines the CPU kernels spread their work units over; it is also the
// NumSMs the CPU passes to Plan (one worker runs one unit at a time, like one program slot of a GPU).
func defaultWorkers() int { return runtime.GOMAXPROCS(0) }
