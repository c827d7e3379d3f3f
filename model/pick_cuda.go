//go:build cuda

package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
)

// stepSlot is one of the backend's two slots for steps in flight: the page-locked buffers a step's
// copies use while it runs, and its events.
type stepSlot struct {
	meta, ids, sample []byte      // metadata staging, landing place of the picked ids, sampler arguments
	uploaded          *cuda.Event // recorded on stream up after the step's metadata upload
	picked            *cuda.Event // recorded on the kernels' stream after the step's pick
	done              *cuda.Event // recorded on stream down after the copy of the picked ids
	inflight          *inflightPick
}

// inflightPick is a step PickAsync queued whose picks have not been read yet.
type inflightPick struct {
	dst  []int32
	slot int
	done bool
	err  error
}

// PickAsync ends the step: it uploads the metadata (on stream up, see upload), queues the recorded ops
// (the decode graph where it can) — unless QueueAsync already did — then the pick of every row of src
// as planPick says: the argmax (fused into the LM head's product where it can, part of the graph) when
// params is nil; else the sampling kernel (kernels/sample.cu, the twin of sampleRowCPU; outside the
// graph, since its arguments change every step), which reads each masked row's bitset where it reads
// the row's logits (the twin of MaskLogits, then sampleRowCPU; the bitsets go up on stream up, in one
// copy: mask_cuda.go) — into the slot's ids on the device, where the next step's InputFrom rows read
// them. The copy of the len(dst) ids into the slot's page-locked memory runs on stream down after the
// slot's picked event, so that the next step's kernels start as soon as this step's end instead of
// after a device-to-host copy (BenchmarkCUDAStepBoundary times it); the slot's done event follows the
// copy. The slot's ids are not written again before that copy has run: the step after next, which
// reuses the slot, is queued only once the host has waited for done (settle). PickAsync returns without
// waiting; wait blocks on done and copies the ids into dst. With both slots in flight, the older step
// is waited for first.
func (b *cudaBackend) PickAsync(dst []int32, src Tensor, params []SampleParams) (func() error, error) {
	queued := b.queued
	b.queued = false
	if len(dst) == 0 && !queued {
		return func() error { return nil }, b.run(nil)
	}
	if params != nil && len(params) != len(dst) {
		return nil, fmt.Errorf("cuda backend: %d sampling parameters for %d rows", len(params), len(dst))
	}
	if queued && params == nil {
		// The ops are queued without the argmax op: greedy rows take the sampling kernel's argmax.
		params = make([]SampleParams, len(dst))
	}
	t := tensorOf(src)
	if len(dst) > src.Rows {
		return nil, fmt.Errorf("cuda backend: pick %d rows of a %d-row tensor", len(dst), src.Rows)
	}
	if err := checkMasks(params, src.Cols); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if !queued {
		if err := b.ensureIDs(max(len(dst), b.st.rows)); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
	}
	kind := planPick(params)
	var rows []sampleRow
	if kind == pickArgmax {
		if err := b.recordArgmax(len(dst), t); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
	} else {
		rows = make([]sampleRow, len(dst))
		for i, p := range params {
			rows[i] = prepareSample(p)
		}
		if err := b.ensureSampleArgs(len(dst)); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
	}
	defer func() { b.ops, b.args = b.ops[:0], b.args[:0] }()
	if b.err != nil {
		return nil, b.err
	}
	k := b.slot
	slot := &b.slots[k]
	if !queued {
		if err := b.settleSlot(slot); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
	}
	var maskBytes int
	if kind == pickMasked {
		var err error
		if maskBytes, err = b.stageMasks(k, params, rows, src.Cols); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
	}
	ids := slot.ids[:4*len(dst)]
	err := b.dev.Do(func() error {
		var err error
		if !queued {
			err = b.upload(slot)
			if err == nil {
				err = b.queue()
			}
		}
		if err == nil {
			err = b.queueMasks(k, maskBytes)
		}
		if err == nil && rows != nil {
			args := slot.sample[:len(rows)*int(unsafe.Sizeof(sampleRow{}))]
			copy(args, cuda.Bytes(rows))
			err = b.dev.CopyToDeviceAsync(b.sampleArgs, args, b.stream)
			if err == nil {
				p := struct {
					Out, Kept, Logits, Args, Masks cuda.DevicePtr
					Cols, Words                    int32
				}{b.idsAt(k), b.sampleKept, t.ptr, b.sampleArgs, b.maskDev[k], int32(src.Cols), int32(maskWords(src.Cols))}
				err = cuda.Launch(b.fn.sample, cuda.Dim3{X: len(dst)}, cuda.Dim3{X: sampleThreads}, 0, b.stream, &p)
			}
		}
		if err == nil {
			err = slot.picked.Record(b.stream)
		}
		if err == nil {
			err = b.down.Wait(slot.picked)
		}
		if err == nil {
			err = b.dev.CopyFromDeviceAsync(ids, b.idsAt(k), b.down)
		}
		if err == nil {
			err = slot.done.Record(b.down)
		}
		if err != nil {
			// Let queued copies finish before a later step rewrites their page-locked buffers.
			_ = errors.Join(b.stream.Synchronize(), b.up.Synchronize(), b.down.Synchronize())
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda backend: step: %w", err)
	}
	p := &inflightPick{dst: dst, slot: k}
	slot.inflight = p
	b.slot ^= 1
	return func() error { return b.settle(p) }, nil
}

// PickBest ends the step like CopyToHost, with each of src's first len(dst) rows reduced on the device to
// its first largest entry over its first cols columns (ArgmaxChunks and ArgmaxPartials, launched after
// the step's ops): dst[r] is that entry's value and index, and bad when those columns hold NaN or +Inf.
// It is a tensor-parallel rank's greedy pick (bestPicker): its slice of the vocabulary is the row's first
// cols columns, padding after them, and only two numbers a row cross to the host.
func (b *cudaBackend) PickBest(dst []rowBest, src Tensor, cols int) error {
	rows := len(dst)
	switch {
	case rows == 0:
		return b.run(nil)
	case rows > src.Rows:
		return fmt.Errorf("cuda backend: pick %d rows of a %d-row tensor", rows, src.Rows)
	case cols < 0 || cols > src.Cols:
		return fmt.Errorf("cuda backend: pick over %d columns of a %d-column tensor", cols, src.Cols)
	case cols == 0: // a rank past the vocabulary's end: nothing to pick from
		for i := range dst {
			dst[i] = rowBest{v: float32(math.Inf(-1))}
		}
		return b.run(nil)
	}
	chunks := (cols + argmaxChunk - 1) / argmaxChunk
	if err := b.ensureArgmaxPartials(chunks * rows); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	if rows > b.bestCap {
		n, old := nextPow2(rows), b.bestPick
		b.bestPick, b.bestCap = 0, 0
		if err := b.dev.Free(old); err != nil {
			return fmt.Errorf("cuda backend: %w", err)
		}
		p, err := b.dev.Alloc(8 * int64(n))
		if err != nil {
			return fmt.Errorf("cuda backend: %w", err)
		}
		b.bestPick, b.bestCap = p, n
	}
	t := tensorOf(src)
	host := make([]byte, 8*rows)
	err := b.run(func() error {
		ch := argmaxChunksParams{Values: b.argValues, Indices: b.argIndices, Logits: t.ptr, Cols: int32(cols),
			Chunks: int32(chunks), Ld: int32(src.Cols)}
		if err := cuda.Launch(b.fn.argmaxChunks, cuda.Dim3{X: chunks, Y: rows}, cuda.Dim3{X: 256}, 0, b.stream, &ch); err != nil {
			return err
		}
		parts := argmaxPartialsParams{Out: b.bestPick, Values: b.argValues, Indices: b.argIndices,
			Best: b.bestPick.Add(4 * int64(rows)), Tiles: int32(chunks)}
		if err := cuda.Launch(b.fn.argmaxPartials, cuda.Dim3{X: rows}, cuda.Dim3{X: 1024}, 0, b.stream, &parts); err != nil {
			return err
		}
		if err := b.stream.Synchronize(); err != nil {
			return err
		}
		if err := b.dev.CopyFromDevice(host, b.bestPick); err != nil { // the indices, then the values
			return err
		}
		for r := range dst {
			i := int32(binary.LittleEndian.Uint32(host[4*r:]))
			v := math.Float32frombits(binary.LittleEndian.Uint32(host[4*(rows+r):]))
			dst[r] = rowBest{v: v, i: i, bad: i < 0}
			if i < 0 {
				dst[r].i = 0
			}
		}
		return nil
	})
	if err == nil {
		b.stats.BestPicks++
	}
	return err
}

// QueueAsync issues the recorded step (the metadata upload and the ops up to src, as PickAsync does)
// without its pick and returns at once; the step's PickAsync follows before any other step begins
// (Model.Begin), and queues only the pick, into the same ring slot. No argmax op is recorded: the pick
// runs on the sampling kernel (which folds in the masks of the rows that have one).
func (b *cudaBackend) QueueAsync(rows int, src Tensor) error {
	defer func() { b.ops, b.args = b.ops[:0], b.args[:0] }()
	switch {
	case b.queued:
		return errors.New("cuda backend: a step is queued without its pick")
	case rows <= 0 || rows > src.Rows:
		return fmt.Errorf("cuda backend: queue a step picking %d rows of a %d-row tensor", rows, src.Rows)
	case b.err != nil:
		return b.err
	}
	if err := b.ensureIDs(max(rows, b.st.rows)); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	slot := &b.slots[b.slot]
	if err := b.settleSlot(slot); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	err := b.dev.Do(func() error {
		err := b.upload(slot)
		if err == nil {
			err = b.queue()
		}
		if err != nil {
			_ = errors.Join(b.stream.Synchronize(), b.up.Synchronize(), b.down.Synchronize())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("cuda backend: step: %w", err)
	}
	b.queued = true
	return nil
}

// settleSlot waits for the step in flight in slot, if any, and gives the slot its events and buffers.
func (b *cudaBackend) settleSlot(slot *stepSlot) error {
	if slot.inflight != nil {
		if err := b.settle(slot.inflight); err != nil {
			return fmt.Errorf("step: %w", err)
		}
	}
	return b.ensureSlot(slot)
}

// ensureSlot gives a slot its events and an ids landing place of idsCap ids.
func (b *cudaBackend) ensureSlot(slot *stepSlot) error {
	for _, ev := range []**cuda.Event{&slot.uploaded, &slot.picked, &slot.done} {
		if *ev == nil {
			e, err := b.dev.NewSyncEvent()
			if err != nil {
				return err
			}
			*ev = e
		}
	}
	if len(slot.ids) < 4*b.idsCap {
		if err := b.dev.FreeHost(slot.ids); err != nil {
			return err
		}
		slot.ids = nil
		p, err := b.dev.AllocHost(4 * b.idsCap)
		if err != nil {
			return err
		}
		slot.ids = p
	}
	return nil
}

// settle waits for p's step to end and copies its picks into p.dst; later calls return the same error.
func (b *cudaBackend) settle(p *inflightPick) error {
	if p.done {
		return p.err
	}
	p.done = true
	slot := &b.slots[p.slot]
	if p.err = slot.done.Synchronize(); p.err == nil {
		copy(cuda.Bytes(p.dst), slot.ids[:4*len(p.dst)])
	}
	slot.inflight = nil
	return p.err
}

// quiesce waits for the steps in flight (the older first) and hands over their picks, so that buffers
// they use may be replaced.
func (b *cudaBackend) quiesce() error {
	var errs []error
	for _, k := range []int{b.slot, b.slot ^ 1} { // b.slot was issued before b.slot^1, if both are in flight
		if p := b.slots[k].inflight; p != nil {
			errs = append(errs, b.settle(p))
		}
	}
	return errors.Join(errs...)
}

// idsAt is ring slot k's pick buffer on the device: idsCap ids.
func (b *cudaBackend) idsAt(k int) cuda.DevicePtr { return b.ids.Add(4 * int64(k*b.idsCap)) }

// ensureIDs makes each slot's pick buffer on the device hold n ids. A new buffer keeps the old one's
// ids (the next step's InputFrom rows read them) and drops the graphs, whose ops named the old one; the
// slots' landing places grow at their next step (ensureSlot).
func (b *cudaBackend) ensureIDs(n int) error {
	if n <= b.idsCap {
		return nil
	}
	n = nextPow2(n)
	if err := b.dropGraphs(); err != nil { // waits for the steps in flight
		return err
	}
	p, err := b.dev.Alloc(4 * int64(2*n))
	if err != nil {
		return err
	}
	if err := b.dev.Fill32(p, 0, int64(2*n), b.stream); err != nil {
		return errors.Join(err, b.dev.Free(p))
	}
	if b.ids != 0 {
		var err error
		for k := range b.slots {
			if err == nil {
				err = b.dev.CopyDevice(p.Add(4*int64(k*n)), b.idsAt(k), 4*int64(b.idsCap), b.stream)
			}
		}
		if err == nil {
			err = b.stream.Synchronize()
		}
		if err == nil {
			err = b.dev.Free(b.ids)
		}
		if err != nil {
			return errors.Join(err, b.dev.Free(p))
		}
	}
	b.ids, b.idsCap = p, n
	return nil
}
