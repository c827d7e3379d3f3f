//go:build cuda && gollmdiag

package model

import "github.com/gollm/gollm/attention"

// The decode variants that need the gollmdiag build (wrong results, for where the step's time goes):
// decode attention's programs cut short after their PDL wait, after their tile loop, before their merge
// (attention.CUDATuning.WithDiagnose).
func init() {
	decodeVariants = append(decodeVariants, []struct {
		name string
		tune gemvTuning
		attn attention.CUDATuning
	}{
		{"attn-diag-entry", defaultGemvTuning, attention.CUDATuning{}.WithDiagnose(attention.DiagnoseEntry)},
		{"attn-diag-loop", defaultGemvTuning, attention.CUDATuning{}.WithDiagnose(attention.DiagnoseLoop)},
		{"attn-diag-nomerge", defaultGemvTuning, attention.CUDATuning{}.WithDiagnose(attention.DiagnoseNoMerge)},
	}...)
}
