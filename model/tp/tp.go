// Package tp holds what tensor parallelism needs below the model: the Communicator through which the
// ranks of one model (each holding a shard of every weight) combine their partial results, and an
// in-process implementation over goroutines and host memory that the CPU tests run on.
//
// The package owns the collectives and their failure rule: once any rank of a group fails (Abort, or a
// rank function of Run returning an error or panicking), every pending and every later collective of
// every rank returns an error wrapping ErrAborted, so that no rank waits forever on a peer that has
// gone. It knows nothing of models, weights or devices; a device communicator (NCCL) implements the
// same interface elsewhere.
package tp

import (
	"errors"
	"fmt"
	"sync"
)

// ErrAborted is wrapped by the errors of the collectives of a group that a rank has failed.
var ErrAborted = errors.New("tensor-parallel group aborted")

// Communicator is one rank's end of a group of Size ranks. Every rank must call the same collectives
// in the same order with slices of the same length; a collective returns when every rank has joined it
// (or the group has failed). A Communicator is used by one goroutine: its rank's.
type Communicator interface {
	// Rank is this rank's index in [0, Size).
	Rank() int
	// Size is the number of ranks of the group.
	Size() int
	// AllReduceSum replaces x, on every rank, with the element-wise sum of every rank's x. The sum is
	// taken in rank order, so that every rank gets the same bits.
	AllReduceSum(x []float32) error
	// Abort fails the group with err: every pending and later collective of every rank returns an error
	// wrapping ErrAborted and err. The first Abort's err is the one reported; later ones change nothing.
	Abort(err error)
}

// group is the state the ranks of an in-process group share. A round of the all-reduce runs in two
// phases: arrival (each rank leaves its slice; the last to arrive computes the sum) and departure
// (each rank copies the sum out; the last to leave opens the next round).
type group struct {
	mu   sync.Mutex
	cond *sync.Cond
	size int
	err  error

	arrived  int
	draining bool // the result is ready and ranks are copying it out
	left     int
	src      [][]float32
	result   []float32
}

// inProcess is one rank of an in-process group.
type inProcess struct {
	g    *group
	rank int
}

// NewInProcess returns the size ranks of a group whose collectives run over goroutines and shared host
// memory: hand each to its own goroutine. size must be at least 1.
func NewInProcess(size int) ([]Communicator, error) {
	if size < 1 {
		return nil, fmt.Errorf("tp: group of %d ranks, need at least 1", size)
	}
	g := &group{size: size, src: make([][]float32, size)}
	g.cond = sync.NewCond(&g.mu)
	comms := make([]Communicator, size)
	for r := range comms {
		comms[r] = &inProcess{g: g, rank: r}
	}
	return comms, nil
}

func (c *inProcess) Rank() int { return c.rank }
func (c *inProcess) Size() int { return c.g.size }

func (c *inProcess) Abort(err error) {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.abortLocked(fmt.Errorf("rank %d: %w", c.rank, err))
}

func (g *group) abortLocked(err error) {
	if g.err == nil {
		g.err = err
		g.cond.Broadcast()
	}
}

func (g *group) failed() error { return fmt.Errorf("tp: %w: %w", ErrAborted, g.err) }

// AllReduceSum runs one round: every rank's x in, their sum copied back into each.
func (c *inProcess) AllReduceSum(x []float32) error {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.draining && g.err == nil { // the previous round is still being copied out
		g.cond.Wait()
	}
	if g.err != nil {
		return g.failed()
	}
	if other := g.arrivedSrc(); other != nil && len(other) != len(x) {
		g.abortLocked(fmt.Errorf("rank %d: an all-reduce of %d values while others sum %d", c.rank, len(x), len(other)))
		return g.failed()
	}
	g.src[c.rank] = x
	g.arrived++
	if g.arrived == g.size {
		g.compute()
		g.draining = true
		g.cond.Broadcast()
	}
	for !g.draining && g.err == nil {
		g.cond.Wait()
	}
	if g.err != nil {
		return g.failed()
	}
	copy(x, g.result)
	g.left++
	if g.left == g.size {
		g.arrived, g.left, g.draining = 0, 0, false
		clear(g.src)
		g.cond.Broadcast()
	}
	return nil
}

// arrivedSrc returns the slice of some rank already in the round, or nil.
func (g *group) arrivedSrc() []float32 {
	for _, s := range g.src {
		if s != nil {
			return s
		}
	}
	return nil
}

// compute forms the round's sum from every rank's src, in rank order.
func (g *group) compute() {
	n := len(g.src[0])
	g.result = append(g.result[:0], g.src[0]...)
	for _, s := range g.src[1:] {
		for i, v := range s[:n] {
			g.result[i] += v
		}
	}
}

// Run runs f once per rank of comms, each on its own goroutine, and returns when every rank has
// returned: nil, or the first failure. A rank whose f returns an error or panics aborts the group, so
// that its peers' collectives fail instead of waiting for it.
func Run(comms []Communicator, f func(c Communicator) error) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("tp: rank %d panicked: %v", r, p)
					c.Abort(errs[r])
				}
			}()
			if err := f(c); err != nil {
				errs[r] = fmt.Errorf("tp: rank %d: %w", r, err)
				c.Abort(err)
			}
		}()
	}
	wg.Wait()
	// Report the root cause: a rank's own failure before the aborts it caused in its peers.
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrAborted) {
			return err
		}
	}
	return errors.Join(errs...)
}
