//go:build cuda

package model

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
)

// maskThreads is MaskRows' block (MASK_THREADS in kernels/mask.cu).
const maskThreads = 256

// maskedPicks is the state of the picks that wait for their masks. queued is set between QueueAsync
// and the step's PickAsync (Model.Begin, then Pick.Commit). The rest are the masked pick's buffers
// (planPick's pickMasked; see PickAsync), one set per ring slot: a page-locked staging buffer and a
// device buffer, each holding the masked rows' logits row indices (int32, padded to 8 bytes) and then
// their bitsets (words uint64 each), and the event that marks the end of the slot's upload. The upload
// runs on stream up, beside the step's kernels; the kernels' stream waits for it only before MaskRows,
// so that a mask committed while the step's forward runs (Model.Begin) costs that forward nothing. A
// slot's buffers are rewritten only once its step was settled (its pick ran).
type maskedPicks struct {
	queued   bool
	maskHost [2][]byte
	maskDev  [2]cuda.DevicePtr
	maskCap  [2]int // bytes of maskDev
	maskUp   [2]*cuda.Event
	maskFn   *cuda.Function // MaskRows, loaded at first use
}

// maskLayout returns the byte offset of the bitsets in a slot's mask buffer of masked rows, and the
// buffer's size for words words a row.
func maskLayout(masked, words int) (bitsAt, size int) {
	bitsAt = (4*masked + 7) &^ 7
	return bitsAt, bitsAt + 8*masked*words
}

// ensureMasks makes slot k's mask buffers hold size bytes and loads MaskRows. Slot k has no step in
// flight (PickAsync settled it), so its buffers may be replaced.
func (b *cudaBackend) ensureMasks(k, size int) error {
	if b.maskFn == nil {
		f, err := b.mod.Function("MaskRows")
		if err != nil {
			return err
		}
		b.maskFn = f
	}
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
// buffer, after ensureMasks; it returns the number of masked rows and the bytes staged.
func (b *cudaBackend) stageMasks(k int, params []SampleParams, cols int) (masked, size int, err error) {
	words := maskWords(cols)
	for _, p := range params {
		if p.Mask != nil {
			masked++
		}
	}
	if masked == 0 {
		return 0, 0, nil
	}
	bitsAt, size := maskLayout(masked, words)
	if err := b.ensureMasks(k, size); err != nil {
		return 0, 0, err
	}
	staged := b.maskHost[k][:size]
	rows := unsafe.Slice((*int32)(unsafe.Pointer(&staged[0])), masked)
	bits := unsafe.Slice((*uint64)(unsafe.Pointer(&staged[bitsAt])), masked*words)
	m := 0
	for r, p := range params {
		if p.Mask == nil {
			continue
		}
		rows[m] = int32(r)
		copy(bits[m*words:(m+1)*words], p.Mask[:words])
		m++
	}
	return masked, size, nil
}

// queueMasks uploads slot k's staged masks on stream up and queues MaskRows over logits t on the
// kernels' stream once the upload has landed. It runs inside Do.
func (b *cudaBackend) queueMasks(k, masked, size int, t *cudaTensor, cols int) error {
	if masked == 0 {
		return nil
	}
	if err := b.dev.CopyToDeviceAsync(b.maskDev[k], b.maskHost[k][:size], b.up); err != nil {
		return err
	}
	if err := b.maskUp[k].Record(b.up); err != nil {
		return err
	}
	if err := b.stream.Wait(b.maskUp[k]); err != nil {
		return err
	}
	words := maskWords(cols)
	bitsAt, _ := maskLayout(masked, words)
	p := struct {
		Logits, Rows, Bits cuda.DevicePtr
		Cols, Words        int32
	}{t.ptr, b.maskDev[k], b.maskDev[k].Add(int64(bitsAt)), int32(cols), int32(words)}
	grid := cuda.Dim3{X: (cols + maskThreads - 1) / maskThreads, Y: masked}
	if err := cuda.Launch(b.maskFn, grid, cuda.Dim3{X: maskThreads}, 0, b.stream, &p); err != nil {
		return fmt.Errorf("mask rows: %w", err)
	}
	return nil
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
	b.maskFn = nil
	return errors.Join(errs...)
}
