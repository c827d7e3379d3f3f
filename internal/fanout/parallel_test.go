package fanout

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// TestFor checks that every index runs once, inline or on goroutines, each goroutine with a scratch of
// its own.
func TestFor(t *testing.T) {
	for _, tc := range []struct{ workers, n int }{{4, 0}, {0, 5}, {1, 7}, {3, 1}, {3, 100}, {16, 5}, {8, 1000}} {
		t.Run(fmt.Sprintf("workers%d_n%d", tc.workers, tc.n), func(t *testing.T) {
			seen := make([]atomic.Int32, tc.n)
			var scratches atomic.Int32
			For(tc.workers, tc.n, func() *int { scratches.Add(1); return new(int) }, func(s *int, i int) {
				*s++ // a shared scratch would race (go test -race)
				seen[i].Add(1)
			})
			for i := range seen {
				if got := seen[i].Load(); got != 1 {
					t.Errorf("index %d ran %d times", i, got)
				}
			}
			if got, most := int(scratches.Load()), max(1, min(tc.workers, tc.n)); tc.n > 0 && (got < 1 || got > most) {
				t.Errorf("%d scratches, want 1 to %d", got, most)
			}
			var each atomic.Int32
			Each(tc.workers, tc.n, func(int) { each.Add(1) })
			if int(each.Load()) != tc.n {
				t.Errorf("Each ran %d of %d", each.Load(), tc.n)
			}
		})
	}
}
