//go:build cuda

package model

import (
	"fmt"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/model/tp"
)

// deviceCollective is how a CUDA rank of a tensor-parallel model sums its float32 activations with the
// other ranks' (the AllReduceSum op): NCCL between GPUs, or through host memory where ranks share a
// GPU.
type deviceCollective interface {
	// allReduceSum sums the n float32 values at p over the ranks, in place: queued on the backend's
	// stream, or done before it returns. It runs inside the backend's Do, from the rank's goroutine.
	allReduceSum(b *cudaBackend, p cuda.DevicePtr, n int) error
	// capturable reports whether allReduceSum may be recorded into a CUDA graph.
	capturable() bool
	// abort stops this rank's collectives queued or running, from any goroutine, so that a rank whose
	// peer has failed with err returns instead of waiting for it.
	abort(err error)
}

// ncclCollective is a rank's NCCL communicator: the all-reduce is a kernel on the rank's stream, inside
// the decode step's graph.
type ncclCollective struct{ comm *cuda.Comm }

func (c ncclCollective) allReduceSum(b *cudaBackend, p cuda.DevicePtr, n int) error {
	return c.comm.AllReduceSum(p, n, cuda.Float32, b.stream)
}

func (ncclCollective) capturable() bool { return true }

func (c ncclCollective) abort(error) { _ = c.comm.Abort() }

// hostCollective sums through host memory with a tp.Communicator: the rank waits for its stream, copies
// the values out, joins the group's sum and copies the result back. It serves ranks that share one GPU,
// which NCCL refuses (tests run a TP 2 or 4 model on one GPU with it); it cannot be captured, so such a
// model's steps run eagerly.
type hostCollective struct {
	comm tp.Communicator
	buf  []float32
}

func (c *hostCollective) allReduceSum(b *cudaBackend, p cuda.DevicePtr, n int) error {
	if cap(c.buf) < n {
		c.buf = make([]float32, n)
	}
	buf := c.buf[:n]
	if err := b.stream.Synchronize(); err != nil {
		return err
	}
	if err := b.dev.CopyFromDevice(cuda.Bytes(buf), p); err != nil {
		return err
	}
	if err := c.comm.AllReduceSum(buf); err != nil {
		return fmt.Errorf("all-reduce: %w", err)
	}
	return b.dev.CopyToDevice(p, cuda.Bytes(buf))
}

func (*hostCollective) capturable() bool { return false }

func (c *hostCollective) abort(err error) { c.comm.Abort(err) }
