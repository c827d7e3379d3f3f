//go:build cuda

package model

import (
	"errors"
	"fmt"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/internal/cuda"
)

// The graphs: a decode step of a bucket runs eagerly once (warming cuBLAS), is captured the second
// time, and is replayed after that (see cudaBackend).

// graphCache holds the captured steps.
type graphCache struct {
	graphs map[graphKey]*graphEntry
	// graphsOff is set when capture failed once: later steps run eagerly. pdlOff is set when a capture
	// with programmatic dependent launches failed (the capture is retried without).
	graphsOff, pdlOff bool
	lastGraph         *cuda.GraphExec // the graph the last step launched (benchmarks time it alone)
	// sharedKeys are the shared-prefix buckets with captured graphs (graphKey.shared), at most
	// maxSharedGraphKeys of them (sharedGraphRoom); a bucket is added at its first capture.
	sharedKeys map[attention.SharedGraphKey]bool
}

// maxSharedGraphKeys bounds the shared-prefix buckets that get graphs (each a graph for every ring slot,
// batch bucket and context cap it runs at): a step of another bucket runs eagerly. Each bucket is a plan
// of the groups' sizes; a server sees a few of them for many steps. A bucket counts from its first
// capture, which waits for its second step (queue), so buckets seen once take no room.
const maxSharedGraphKeys = 16

// graphKey names a captured step: its bucket, its ops (sig), the ring slot whose pick buffers it names
// (a step reads the other slot's picks and writes its own's), and its shared-prefix bucket (zero for
// the plain kernels: a shared step records the same ops as a plain one, and plans them otherwise).
type graphKey struct {
	rows, stride, contextCap, slot int
	sig                            uint64
	shared                         attention.SharedGraphKey
}

// sharedGraphRoom reports whether a step of shared-prefix bucket k may be planned as a graph: its bucket
// has graphs already, or fewer than maxSharedGraphKeys buckets do (sharedDecision asks it as it plans the
// step, so a capture never takes a bucket past the bound).
func (b *cudaBackend) sharedGraphRoom(k attention.SharedGraphKey) bool {
	return b.sharedKeys[k] || len(b.sharedKeys) < maxSharedGraphKeys
}

// countShared counts the step's attention calls that run the shared-prefix algorithm
// (cudaStats.SharedDecodes), when the step is queued: a graph's replay runs none of the executor's code.
func (b *cudaBackend) countShared() {
	if b.st.shared == nil {
		return
	}
	for i := range b.ops {
		if op := &b.ops[i]; sharedPrefixOp(op) && !b.tune.diag.skips(op.kind) {
			b.stats.SharedDecodes++
		}
	}
}

// graphEntry is a bucket's graph: seen once eagerly, then captured.
type graphEntry struct {
	exec *cuda.GraphExec
}

// dropGraphs destroys every captured graph, once no step is in flight.
func (b *cudaBackend) dropGraphs() error {
	if err := b.quiesce(); err != nil {
		return err
	}
	var errs []error
	for k, g := range b.graphs {
		if g.exec != nil {
			errs = append(errs, g.exec.Destroy())
		}
		delete(b.graphs, k)
	}
	clear(b.sharedKeys)
	return errors.Join(errs...)
}

// queue runs the recorded ops: as a graph when the step allows it, else eagerly.
func (b *cudaBackend) queue() error {
	st := &b.st
	b.countShared()
	if b.prof != nil {
		b.stats.Eager++
		return b.profileQueue()
	}
	if b.graphRows() > 0 {
		key := graphKey{rows: st.rows, stride: st.stride, contextCap: st.contextCap, slot: b.slot, sig: b.sig}
		if st.shared != nil {
			key.shared = st.shared.Graph
		}
		g, seen := b.graphs[key]
		switch {
		case seen && g.exec != nil:
			b.stats.Replayed++
			b.lastGraph = g.exec
			return g.exec.Launch(b.stream)
		case seen:
			exec, err := b.capture(st.rows)
			if err != nil && b.pdlNow() {
				// Retry without programmatic dependent launches (a driver that cannot capture them).
				b.pdlOff, b.stats.PDLCaptureFailed = true, err
				exec, err = b.capture(st.rows)
			}
			if err == nil {
				g.exec = exec
				b.stats.Captured++
				if key.shared != (attention.SharedGraphKey{}) {
					if b.sharedKeys == nil {
						b.sharedKeys = map[attention.SharedGraphKey]bool{}
					}
					b.sharedKeys[key.shared] = true
				}
				b.lastGraph = exec
				return exec.Launch(b.stream)
			}
			b.graphsOff, b.stats.CaptureFailed = true, err
		default:
			b.graphs[key] = &graphEntry{}
		}
		b.stats.Eager++
		return b.eager(st.rows) // the bucket's warm-up run: the same launches as the graph will hold
	}
	b.stats.Eager++
	return b.eager(0)
}

// graphRows is the bucket the step's ops run padded to, as a graph (and, under a profile, op by op as
// the graph would run them), or 0 when the step runs eagerly on its own rows: when it is not a graph
// step, graphs are off, or an op cannot run padded (graphable).
func (b *cudaBackend) graphRows() int {
	if b.st.graph && !b.graphsOff && b.graphable() {
		return b.st.rows
	}
	return 0
}

// graphable reports whether every op can run padded to the step's bucket.
func (b *cudaBackend) graphable() bool {
	for _, op := range b.ops {
		if !op.graphable || op.capacity < b.st.rows {
			return false
		}
	}
	return true
}

// eager queues the ops on the stream as planned at rows rows (0: each at its own row count; else the
// graph's bucket).
func (b *cudaBackend) eager(rows int) error {
	b.st.graphRun = rows > 0
	plans := b.plan(rows)
	for i := range b.ops {
		if b.tune.diag.skips(b.ops[i].kind) {
			continue
		}
		if b.failOp > 0 && i == b.failOp-1 {
			return fmt.Errorf("op %d: failed on purpose (failOp)", i)
		}
		if err := b.runOp(i, &plans[i]); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
	}
	return nil
}

// capture records the ops, padded to rows, into a graph and instantiates it. When anything fails the
// stream is taken out of capture mode and the error returned.
func (b *cudaBackend) capture(rows int) (*cuda.GraphExec, error) {
	if err := b.stream.BeginCapture(); err != nil {
		return nil, err
	}
	runErr := b.eager(rows)
	g, endErr := b.stream.EndCapture()
	if err := errors.Join(runErr, endErr); err != nil {
		if g != nil && endErr == nil {
			_ = g.Destroy()
		}
		return nil, fmt.Errorf("capture: %w", err)
	}
	exec, err := g.Instantiate()
	if derr := g.Destroy(); err == nil && derr != nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return exec, nil
}
