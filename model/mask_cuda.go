//go:build cuda

package model

import (
	"errors"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
)

// maskedPicks is the state of the picks that wait for their masks. queued is set between QueueAsync
// and the step's PickAsync (Model.Begin, then Pick.Commit). The rest are the masked pick's buffers
// (planPick's pickMasked; see PickAsync), one set per ring slot: a page-locked staging buffer and a
// device buffer, each holding the masked rows' bitsets (words uint64 each) one after the other, and the
// event that marks the end of the slot's upload. The masks of a step go up in one copy, on stream up,
// beside the step's kernels; the kernels' stream waits for it only before the sampling kernel, which
// reads the bitsets where it reads the logits (kernels/sample.cu: the mask is folded into the pick, the
// logits are never written), so that a mask committed while the step's forward runs (Model.Begin)
// costs that forward nothing. A slot's buffers are rewritten only once its step was settled (its pick
// ran).
type maskedPicks struct {
	queued   bool
	maskHost [2][]byte
	maskDev  [2]cuda.DevicePtr
	maskCap  [2]int // bytes of maskDev
	maskUp   [2]*cuda.Event
}

// ensureMasks makes slot k's mask buffers hold size bytes. Slot k has no step in flight (PickAsync
// settled it), so its buffers may be replaced.
func (b *cudaBackend) ensureMasks(k, size int) error {
	if b.maskUp[k] == nil {
		ev, err := b.dev.NewSyncEvent()
		if err != nil {
			return err
		}
		b.maskUp[k] = ev
	}
	if size <= b.maskCap[k] {
		return nil
	}
	size = nextPow2(size)
	if err := errors.Join(b.dev.Free(b.maskDev[k]), b.dev.FreeHost(b.maskHost[k])); err != nil {
		return err
	}
	b.maskDev[k], b.maskHost[k], b.maskCap[k] = 0, nil, 0
	p, err := b.dev.Alloc(int64(size))
	if err != nil {
		return err
	}
	b.maskDev[k] = p
	if b.maskHost[k], err = b.dev.AllocHost(size); err != nil {
		return err
	}
	b.maskCap[k] = size
	return nil
}

// stageMasks copies the masks of params (one per logits row; nil: unmasked) into slot k's staging
// buffer, after ensureMasks, and points each masked row's kernel arguments at its bitset (rows[r].Mask:
// 1 + its index among the staged bitsets); it returns the bytes staged (0: no row is masked).
func (b *cudaBackend) stageMasks(k int, params []SampleParams, rows []sampleRow, cols int) (size int, err error) {
	words := maskWords(cols)
	masked := 0
	for _, p := range params {
		if p.Mask != nil {
			masked++
		}
	}
	if masked == 0 {
		return 0, nil
	}
	size = 8 * masked * words
	if err := b.ensureMasks(k, size); err != nil {
		return 0, err
	}
	bits := unsafe.Slice((*uint64)(unsafe.Pointer(&b.maskHost[k][0])), masked*words)
	m := 0
	for r, p := range params {
		if p.Mask == nil {
			continue
		}
		copy(bits[m*words:(m+1)*words], p.Mask[:words])
		m++
		rows[r].Mask = int32(m)
	}
	return size, nil
}

// queueMasks uploads slot k's size staged bytes of masks on stream up, in one copy, and makes the
// kernels' stream wait for it (the sampling kernel reads them). It runs inside Do.
func (b *cudaBackend) queueMasks(k, size int) error {
	if size == 0 {
		return nil
	}
	if err := b.dev.CopyToDeviceAsync(b.maskDev[k], b.maskHost[k][:size], b.up); err != nil {
		return err
	}
	if err := b.maskUp[k].Record(b.up); err != nil {
		return err
	}
	return b.stream.Wait(b.maskUp[k])
}

// freeMasks releases the mask buffers (Close).
func (b *cudaBackend) freeMasks() error {
	var errs []error
	for k := range b.maskDev {
		errs = append(errs, b.dev.Free(b.maskDev[k]), b.dev.FreeHost(b.maskHost[k]))
		if b.maskUp[k] != nil {
			errs = append(errs, b.maskUp[k].Destroy())
		}
		b.maskDev[k], b.maskHost[k], b.maskCap[k], b.maskUp[k] = 0, nil, 0, nil
	}
	return errors.Join(errs...)
}
