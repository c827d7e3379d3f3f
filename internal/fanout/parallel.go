// Package fanout spreads a loop over goroutines: the one way gollm's CPU work (the CPU kernels,
// host-side picks, weight scans and conversions at load) uses the host's cores. It owns no state and
// knows nothing of what the loop does.
package fanout

import (
	"sync"
	"sync/atomic"
)

// For runs body(s, i) for every i in [0, n) on at most workers goroutines. Each goroutine owns one
// scratch from newScratch and takes the next index from a shared counter, so uneven items balance
// themselves without a goroutine an item. With one worker (or one item) it runs inline, on the
// caller's goroutine. Every index is run exactly once, in no promised order: body must touch only
// its own item's data and its scratch.
func For[S any](workers, n int, newScratch func() S, body func(s S, i int)) {
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

// Each is For without a scratch.
func Each(workers, n int, body func(i int)) {
	For(workers, n, func() struct{} { return struct{}{} }, func(_ struct{}, i int) { body(i) })
}
