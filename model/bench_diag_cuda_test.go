//go:build cuda && gollmdiag

package model

import "github.com/gollm/gollm/attention"

// The decode variants that need the gollmdiag build (wrong results, for where the step's time goes): ops
// left out of the step (stepDiag.Skip), the norm folds' parts left out (stepDiag.NormFold), decode
// attention's programs cut short after their PDL wait, after their tile loop, before their merge
// (attention.CUDATuning.WithDiagnose).
func init() {
	decodeVariants = append(decodeVariants, []struct {
		name string
		tune gemvTuning
		attn attention.CUDATuning
	}{
		{"skip-attention", tweak(func(t *gemvTuning) { t.diag.Skip = []string{"attention"} }), attention.CUDATuning{}},
		{"normfold-diag1", tweak(func(t *gemvTuning) { t.diag.NormFold = 1 }), attention.CUDATuning{}},
		{"normfold-diag2", tweak(func(t *gemvTuning) { t.diag.NormFold = 2 }), attention.CUDATuning{}},
		{"normfold-diag3", tweak(func(t *gemvTuning) { t.diag.NormFold = 3 }), attention.CUDATuning{}},
		{"normfold-diag4", tweak(func(t *gemvTuning) { t.diag.NormFold = 4 }), attention.CUDATuning{}},
		{"normfold-diag8", tweak(func(t *gemvTuning) { t.diag.NormFold = 8 }), attention.CUDATuning{}},
		// The skip variants that leave out the norm keep the products whole (SplitK −1): a split product's
		// halves are summed by the norm, whose cost would otherwise leave with it.
		{"skip-norm", tweak(func(t *gemvTuning) { t.diag.Skip, t.SplitK = []string{"norm"}, -1 }), attention.CUDATuning{}},
		{"skip-rope", tweak(func(t *gemvTuning) { t.diag.Skip = []string{"rope"} }), attention.CUDATuning{}},
		{"skip-swiglu", tweak(func(t *gemvTuning) { t.diag.Skip = []string{"swiglu"} }), attention.CUDATuning{}},
		{"skip-argmax", tweak(func(t *gemvTuning) { t.diag.Skip = []string{"argmax"} }), attention.CUDATuning{}},
		{"matmul-only", tweak(func(t *gemvTuning) {
			t.diag.Skip, t.SplitK = []string{"attention", "norm", "embed", "rope", "swiglu", "gather", "argmax"}, -1
		}), attention.CUDATuning{}},
		{"attn-diag-entry", defaultGemvTuning, attention.CUDATuning{}.WithDiagnose(attention.DiagnoseEntry)},
		{"attn-diag-loop", defaultGemvTuning, attention.CUDATuning{}.WithDiagnose(attention.DiagnoseLoop)},
		{"attn-diag-nomerge", defaultGemvTuning, attention.CUDATuning{}.WithDiagnose(attention.DiagnoseNoMerge)},
	}...)
}
