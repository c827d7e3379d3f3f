package attention

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// defaultWorkers is the number of goroutines the CPU kernels spread their work units over; it is also the
// NumSMs the CPU passes to Plan (one worker runs one unit at a time, like one program slot of a GPU).
func defaultWorkers() int { return runtime.GOMAXPROCS(0) }

// parallelFor runs body(s, i) for every i in [0, n) on at most workers goroutines. Each goroutine owns one
// scratch from newScratch and takes the next unit from a shared counter, so uneven units (ragged contexts)
// balance themselves without a goroutine per unit. With one worker (or one unit) it runs inline.
func parallelFor[S any](workers, n int, newScratch func() S, body func(s S, i int)) {
	if n <= 0 {
		return
	}
	workers = min(workers, n)
	if workers <= 1 {
		s := newScratch()
		for i := range n {
			body(s, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			s := newScratch()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				body(s, i)
			}
		})
	}
	wg.Wait()
}
