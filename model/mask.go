package model

import (
	"fmt"
	"math"
)

// Masked picks (structured output): a row whose SampleParams.Mask is set picks among the tokens the
// mask allows. On the host MaskLogits applies the mask to the logits before the pick; on the device the
// sampling kernel (kernels/sample.cu) reads the mask where it reads the logits, to the same effect and
// without writing them. One rule for both: a logit the mask leaves out counts as −∞ unless it is NaN or
// +Inf, so that a row whose model numbers broke is still picked as NonFinitePick whatever the mask
// says (the engine's host sampler checks the raw row first, to the same effect).

// MaskLogits sets to −∞ the logits of x whose tokens mask leaves out (bit id%64 of mask[id/64] clear;
// ids past the mask are left out too), NaN and +Inf excepted. It is the CPU twin of the device pick's
// masked reads (kernels/sample.cu), and what the engine's host sampler applies.
func MaskLogits(x []float32, mask []uint64) {
	inf := float32(math.Inf(-1))
	for w, bits := range mask {
		if bits == ^uint64(0) {
			continue
		}
		lo := w * 64
		if lo >= len(x) {
			break
		}
		hi := min(lo+64, len(x))
		for i := lo; i < hi; i++ {
			if bits&(1<<(i-lo)) == 0 && x[i] < float32(math.Inf(1)) {
				x[i] = inf
			}
		}
	}
	for i := len(mask) * 64; i < len(x); i++ {
		if x[i] < float32(math.Inf(1)) {
			x[i] = inf
		}
	}
}

// maskWords is the length of a mask over cols tokens.
func maskWords(cols int) int { return (cols + 63) / 64 }

// pickKind is how a step's picks run on a PickBackend (planPick).
type pickKind uint8

const (
	// pickArgmax: every row greedy and unmasked: the argmax, which the step plan may fuse into the LM
	// head's product (planStep's argmaxGemv, argmaxGemm).
	pickArgmax pickKind = iota
	// pickSample: the sampling kernel over every row (greedy rows take its argmax).
	pickSample
	// pickMasked: the sampling kernel over every row, the masked rows' bitsets read beside their logits.
	// The argmax is never fused into the LM head then: the mask must come between the logits and the
	// pick.
	pickMasked
)

func (k pickKind) String() string { return [...]string{"argmax", "sample", "masked"}[k] }

// planPick decides how a step's picks run from their parameters: nil params is the argmax of every
// row; any mask makes the step masked; else the sampling kernel. It is pure, so that the rule that a
// masked step never takes the fused argmax is tested without a device (TestPlanPick).
func planPick(params []SampleParams) pickKind {
	if params == nil {
		return pickArgmax
	}
	for _, p := range params {
		if p.Mask != nil {
			return pickMasked
		}
	}
	return pickSample
}

// checkMasks checks that every mask of params covers cols tokens.
func checkMasks(params []SampleParams, cols int) error {
	words := maskWords(cols)
	for i, p := range params {
		if p.Mask != nil && len(p.Mask) < words {
			return fmt.Errorf("%w: the mask of logits row %d holds %d words, %d tokens need %d", ErrInvalidStep, i, len(p.Mask), cols, words)
		}
	}
	return nil
}
