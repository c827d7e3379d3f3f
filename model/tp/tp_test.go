package tp

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// runWithin runs f on every rank and fails the test if the group has not returned within a deadline:
// a hang on a collective is a failure, not a stuck test binary.
func runWithin(t *testing.T, comms []Communicator, f func(c Communicator) error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- Run(comms, f) }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("collectives hung")
		return nil
	}
}

// rankVector is rank r's vector of round k: distinct per rank, round and element.
func rankVector(r, k, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((r+1)*1000 + k*10 + i%7)
	}
	return v
}

func TestAllReduceSum(t *testing.T) {
	for _, tc := range []struct{ size, n, rounds int }{
		{1, 5, 1}, {2, 1, 3}, {2, 1000, 2}, {3, 17, 5}, {4, 0, 2}, {4, 4097, 3}, {8, 33, 20},
	} {
		t.Run(fmt.Sprintf("size%d_n%d_rounds%d", tc.size, tc.n, tc.rounds), func(t *testing.T) {
			comms, err := NewInProcess(tc.size)
			if err != nil {
				t.Fatal(err)
			}
			err = runWithin(t, comms, func(c Communicator) error {
				if c.Size() != tc.size {
					return fmt.Errorf("size %d", c.Size())
				}
				for k := range tc.rounds {
					x := rankVector(c.Rank(), k, tc.n)
					if err := c.AllReduceSum(x); err != nil {
						return err
					}
					want := make([]float32, tc.n)
					for r := range tc.size {
						for i, v := range rankVector(r, k, tc.n) {
							want[i] += v
						}
					}
					for i := range x {
						if x[i] != want[i] {
							return fmt.Errorf("round %d: x[%d] = %v, want %v", k, i, x[i], want[i])
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFailingRankUnblocksOthers(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		size int
		fail func(c Communicator) error // the failing rank's body
	}{
		{"error before the first collective", 4, func(c Communicator) error { return boom }},
		{"error after a round", 3, func(c Communicator) error {
			if err := c.AllReduceSum(make([]float32, 4)); err != nil {
				return err
			}
			return boom
		}},
		{"panic", 2, func(c Communicator) error { panic("rank exploded") }},
		{"mismatched length", 4, func(c Communicator) error { return c.AllReduceSum(make([]float32, 5)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms, _ := NewInProcess(tc.size)
			failing := tc.size - 1
			peerErrs := make([]error, tc.size)
			err := runWithin(t, comms, func(c Communicator) error {
				if c.Rank() == failing {
					return tc.fail(c)
				}
				// The healthy ranks keep calling collectives: the pending one and every later
				// one must fail, none may hang.
				for range 3 {
					err := c.AllReduceSum(make([]float32, 4))
					if err == nil {
						continue
					}
					if !errors.Is(err, ErrAborted) {
						return fmt.Errorf("error %v does not wrap ErrAborted", err)
					}
					peerErrs[c.Rank()] = err
				}
				return peerErrs[c.Rank()]
			})
			if err == nil {
				t.Fatal("the group reported no error")
			}
			if errors.Is(err, ErrAborted) && tc.name != "mismatched length" && tc.name != "mismatched collective" {
				t.Errorf("Run reported a peer's abort %v, want the failing rank's own error", err)
			}
			for r, perr := range peerErrs {
				if r != failing && perr == nil {
					t.Errorf("rank %d: collectives after the failure succeeded", r)
				}
			}
		})
	}
}

func TestNewInProcessRefusesEmptyGroup(t *testing.T) {
	for _, size := range []int{0, -1} {
		if _, err := NewInProcess(size); err == nil {
			t.Errorf("NewInProcess(%d) succeeded", size)
		}
	}
}
