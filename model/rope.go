package model

import (
	"fmt"
	"math"

	"github.com/gollm/gollm/weights"
)

// ropeInvFreq returns the headDim/2 inverse frequencies of the rotary embedding for theta and scaling,
// computed as HF transformers computes them (modeling_rope_utils): every step in float32, with Python
// scalars rounded to float32 where PyTorch rounds them, so that positions × frequencies agree to the bit
// with the reference and only cos/sin may differ in the last ulp.
func ropeInvFreq(headDim int, theta float64, sc weights.RopeScaling) ([]float32, error) {
	if headDim <= 0 || headDim%2 != 0 {
		return nil, fmt.Errorf("model: rope: head_dim %d must be positive and even", headDim)
	}
	if theta <= 0 {
		return nil, fmt.Errorf("model: rope: rope_theta %v must be positive", theta)
	}
	half := headDim / 2
	inv := make([]float32, half)
	base := float64(float32(theta))
	for i := range half {
		// torch.arange(0, dim, 2).float() / dim, then base ** that, then 1.0 / that, all float32.
		exponent := float32(2*i) / float32(headDim)
		inv[i] = 1 / float32(math.Pow(base, float64(exponent)))
	}
	switch sc.Type {
	case "", "default":
		return inv, nil
	case "linear":
		if sc.Factor <= 0 {
			return nil, fmt.Errorf("model: rope: linear scaling factor %v must be positive", sc.Factor)
		}
		factor := float32(sc.Factor)
		for i := range inv {
			inv[i] /= factor
		}
		return inv, nil
	case "llama3":
		return llama3InvFreq(inv, sc)
	}
	return nil, fmt.Errorf("model: rope: unsupported rope type %q", sc.Type)
}

// llama3InvFreq applies Llama 3.1's frequency-dependent scaling to inv in place: wavelengths longer than
// original_max/low_freq_factor are divided by factor, shorter than original_max/high_freq_factor kept, and
// those between interpolated smoothly.
func llama3InvFreq(inv []float32, sc weights.RopeScaling) ([]float32, error) {
	if sc.Factor <= 0 || sc.OriginalMaxPositionEmbeddings <= 0 || sc.LowFreqFactor <= 0 ||
		sc.HighFreqFactor <= sc.LowFreqFactor {
		return nil, fmt.Errorf("model: rope: invalid llama3 scaling %+v", sc)
	}
	factor := float32(sc.Factor)
	low := float32(sc.LowFreqFactor)
	oldContext := float32(sc.OriginalMaxPositionEmbeddings)
	// Python computes these in float64; PyTorch rounds them to float32 when they meet a float32 tensor.
	lowFreqWavelen := float32(float64(sc.OriginalMaxPositionEmbeddings) / sc.LowFreqFactor)
	highFreqWavelen := float32(float64(sc.OriginalMaxPositionEmbeddings) / sc.HighFreqFactor)
	span := float32(sc.HighFreqFactor - sc.LowFreqFactor)
	twoPi := float32(2 * math.Pi)
	for i, f := range inv {
		wavelen := twoPi / f
		scaled := f
		if wavelen > lowFreqWavelen {
			scaled = f / factor
		}
		if !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen) {
			smooth := (oldContext/wavelen - low) / span
			scaled = (1-smooth)*scaled/factor + smooth*scaled
		}
		inv[i] = scaled
	}
	return inv, nil
}
