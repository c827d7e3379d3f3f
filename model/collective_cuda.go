//go:build cuda

package model

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/model/tp"
)

// deviceCollective is how a CUDA rank of a tensor-parallel model sums its float32 activations with the
// other ranks' (the AllReduceSum op): one kernel reading the peers' memory for small sums
// (peerCollective), NCCL between GPUs, or through host memory where ranks share a GPU.
type deviceCollective interface {
	// allReduceSum sums the n float32 values at p over the ranks, in place: queued on the backend's
	// stream, or done before it returns. It runs inside the backend's Do, from the rank's goroutine.
	allReduceSum(b *cudaBackend, p cuda.DevicePtr, n int) error
	// capturable reports whether allReduceSum of n values may be recorded into a CUDA graph.
	capturable(n int) bool
	// abort stops this rank's collectives queued or running, from any goroutine, so that a rank whose
	// peer has failed with err returns instead of waiting for it.
	abort(err error)
	// err reports a failure of the collectives run so far that their calls could not return (work in a
	// replayed graph): the steps' sums since are not to be trusted.
	err() error
}

// ncclCollective is a rank's NCCL communicator: the all-reduce is a kernel on the rank's stream, inside
// the decode step's graph.
type ncclCollective struct{ comm *cuda.Comm }

func (c ncclCollective) allReduceSum(b *cudaBackend, p cuda.DevicePtr, n int) error {
	return c.comm.AllReduceSum(p, n, cuda.Float32, b.stream)
}

func (ncclCollective) capturable(int) bool { return true }

func (c ncclCollective) abort(error) { _ = c.comm.Abort() }

func (c ncclCollective) err() error { return c.comm.Err() }

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

func (*hostCollective) capturable(int) bool { return false }

func (c *hostCollective) abort(err error) { c.comm.Abort(err) }

func (*hostCollective) err() error { return nil } // its calls return their failures

// peerCollective sums at most limit values in one kernel a rank (kernels/allreduce.cu, AllReduceOneShot):
// each rank copies its values into its staging buffer, meets the others at a flag a block, and reads
// every rank's buffer directly (peer access over NVLink, or one GPU's memory where ranks share it). A
// decode step's sums are small (a row of hidden values a sequence), where a ring all-reduce's steps cost
// more than the bytes: one-shot is a launch and a round trip. Larger sums go to fallback.
type peerCollective struct {
	g        *peerGroup
	rank     int
	limit    int              // the most values summed one-shot (at most g.cap)
	fallback deviceCollective // larger sums; nil when limit covers every sum
}

func (c *peerCollective) allReduceSum(b *cudaBackend, p cuda.DevicePtr, n int) error {
	if n > c.limit {
		if c.fallback == nil {
			return fmt.Errorf("all-reduce of %d values: the peer buffers hold %d", n, c.limit)
		}
		return c.fallback.allReduceSum(b, p, n)
	}
	if err := c.g.err(); err != nil {
		return err
	}
	return c.launch(b, p, n)
}

// launch queues the one-shot kernel over p[0, n) (n ≤ c.limit) whether or not the group has failed, as a
// captured graph's replay does.
func (c *peerCollective) launch(b *cudaBackend, p cuda.DevicePtr, n int) error {
	g := c.g
	params := allReduceParams{X: p, Epoch: g.epoch[c.rank], Abort: g.hostDev, Failed: g.hostDev + 4, N: int64(n),
		Cap: int64(g.cap), TimeoutNS: uint64(g.timeout.Nanoseconds()), Rank: int32(c.rank), Ranks: int32(len(g.devs)),
		Blocks: peerBlocks}
	copy(params.Data[:], g.data)
	copy(params.Sig[:], g.sig)
	if n%4 == 0 && p%16 == 0 {
		params.Vec = 1
	}
	return launchDependent(b, b.fn.allReduce, cuda.Dim3{X: peerBlocks}, cuda.Dim3{X: peerThreads}, 0, &params)
}

func (c *peerCollective) capturable(n int) bool {
	return n <= c.limit || c.fallback != nil && c.fallback.capturable(n)
}

func (c *peerCollective) err() error {
	if c.fallback != nil {
		if err := c.fallback.err(); err != nil {
			return err
		}
	}
	return c.g.err()
}

func (c *peerCollective) abort(err error) {
	c.g.abort()
	if c.fallback != nil {
		c.fallback.abort(err)
	}
}

// allReduceParams is AllReduceOneShot's parameter block (kernels/allreduce.cu, AllReduceParams).
type allReduceParams struct {
	X                    cuda.DevicePtr
	Data                 [peerMaxRanks]cuda.DevicePtr
	Sig                  [peerMaxRanks]cuda.DevicePtr
	Epoch, Abort, Failed cuda.DevicePtr
	N, Cap               int64
	TimeoutNS            uint64
	Rank, Ranks, Blocks  int32
	Vec                  int32
}

const (
	// peerMaxRanks is the most ranks of a one-shot group (the kernel's ALLREDUCE_MAX_RANKS).
	peerMaxRanks = 8
	// peerBlocks is the one-shot kernel's grid on every rank (its blocks own the same slices on every
	// rank, and each keeps its own count of calls, so the grid never changes); peerThreads its block.
	peerBlocks  = 16
	peerThreads = 512
	// peerTimeout is the longest a rank waits in the kernel for the others before it gives up and the
	// group fails: long enough for any step a peer may still be running, short of a hang.
	peerTimeout = 60 * time.Second
)

// peerOneShotMax is the most values a group of size ranks sums one-shot when a ring all-reduce
// (NCCL) takes the rest: each rank reads every rank's values, size times the bytes, which beats a ring's
// 2·(size−1) steps only while the bytes are few. vLLM's custom all-reduce keeps its one-shot kernel to
// 512 KB at up to four GPUs and 256 KB at eight.
func peerOneShotMax(size int) int {
	if size <= 4 {
		return 512 << 10 / 4
	}
	return 256 << 10 / 4
}

// peerGroup is the memory of a group's one-shot all-reduce: on each rank's GPU its staging buffer (two
// halves of cap float32), its signal words ([ranks][peerBlocks], written by the ranks) and its blocks'
// counts of calls; in host memory that every GPU maps, the abort word (set by the host when a rank
// fails) and the failed word (set by a kernel whose wait timed out). Every rank's GPU has peer access
// to every other's.
type peerGroup struct {
	devs             []*cuda.Device
	data, sig, epoch []cuda.DevicePtr
	cap              int
	timeout          time.Duration // the longest wait in the kernel (peerTimeout)
	host             []byte        // the abort and failed words
	hostDev          cuda.DevicePtr
	hostOwner        *cuda.Device
}

// newPeerGroup enables peer access between every two of devs (ranks on one GPU need none) and allocates
// the group's memory for sums of up to capFloats values.
func newPeerGroup(devs []*cuda.Device, capFloats int) (_ *peerGroup, err error) {
	if len(devs) < 1 || len(devs) > peerMaxRanks {
		return nil, fmt.Errorf("one-shot all-reduce: %d ranks, want 1 to %d", len(devs), peerMaxRanks)
	}
	for r, d := range devs {
		for s, peer := range devs {
			if r != s {
				if err := d.EnablePeerAccess(peer); err != nil {
					return nil, err
				}
			}
		}
	}
	capFloats = (capFloats + 3) / 4 * 4 // each half 16-byte aligned
	g := &peerGroup{devs: devs, cap: capFloats, timeout: peerTimeout}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.close())
		}
	}()
	sigWords := len(devs) * peerBlocks
	for _, d := range devs {
		data, err := d.Alloc(int64(2 * capFloats * 4))
		if err != nil {
			return nil, err
		}
		g.data = append(g.data, data)
		sig, err := d.Alloc(int64(sigWords * 4))
		if err != nil {
			return nil, err
		}
		g.sig = append(g.sig, sig)
		epoch, err := d.Alloc(peerBlocks * 4)
		if err != nil {
			return nil, err
		}
		g.epoch = append(g.epoch, epoch)
		if err := d.CopyToDevice(sig, make([]byte, sigWords*4)); err != nil {
			return nil, err
		}
		if err := d.CopyToDevice(epoch, make([]byte, peerBlocks*4)); err != nil {
			return nil, err
		}
	}
	if g.host, g.hostDev, err = devs[0].AllocHostMapped(8); err != nil {
		return nil, err
	}
	g.hostOwner = devs[0]
	return g, nil
}

// word is the host word at byte off (0: abort, 4: failed).
func (g *peerGroup) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&g.host[off])) }

// abort makes every rank's waiting kernel return, now and in every later call.
func (g *peerGroup) abort() { atomic.StoreUint32(g.word(0), 1) }

// err reports a group that was aborted or whose kernel gave up waiting.
func (g *peerGroup) err() error {
	switch {
	case atomic.LoadUint32(g.word(0)) != 0:
		return errors.New("one-shot all-reduce: the group was aborted")
	case atomic.LoadUint32(g.word(4)) != 0:
		return fmt.Errorf("one-shot all-reduce: a rank waited %v for its peers", g.timeout)
	}
	return nil
}

// close frees the group's memory (its ranks' work done).
func (g *peerGroup) close() error {
	var errs []error
	for r, d := range g.devs {
		for _, p := range []*[]cuda.DevicePtr{&g.data, &g.sig, &g.epoch} {
			if r < len(*p) {
				errs = append(errs, d.Free((*p)[r]))
			}
		}
	}
	g.data, g.sig, g.epoch = nil, nil, nil
	if g.hostOwner != nil {
		errs = append(errs, g.hostOwner.FreeHost(g.host))
		g.host, g.hostOwner = nil, nil
	}
	return errors.Join(errs...)
}

// collectiveErr is the rank's collective's err (tpBackend checks it after each step's results).
func (b *cudaBackend) collectiveErr() error {
	if b.cfg.coll == nil {
		return nil
	}
	return b.cfg.coll.err()
}
