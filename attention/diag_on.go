//go:build gollmdiag

package attention

// Diagnostic cuts of the mma decode programs, for benchmarks only (the output is wrong; the time is the
// call's without the part cut). They exist only in builds with the gollmdiag tag, whose fat binary
// (attention_diag.fatbin, made by `go generate -tags gollmdiag ./attention` and never committed) compiles
// decode.cuh with DECODE_DIAG.

// The DECODE_FLAG_DIAG_* bits of decode.cuh.
const (
	DiagnoseEntry   = 16 // programs return right after their PDL wait
	DiagnoseLoop    = 32 // programs return after their tile loop (no partial, no merge)
	DiagnoseNoMerge = 64 // split-k programs store their partial and skip the merge
)

// decodeDiag holds a call's diagnostic cuts (Diagnose* bits).
type decodeDiag struct{ cut int32 }

// flags is the DECODE_FLAG_DIAG_* bits of a call.
func (d decodeDiag) flags() int32 { return d.cut & (DiagnoseEntry | DiagnoseLoop | DiagnoseNoMerge) }

// WithDiagnose returns t with the diagnostic cuts bits (Diagnose*).
func (t CUDATuning) WithDiagnose(bits int) CUDATuning {
	t.diag = decodeDiag{cut: int32(bits)}
	return t
}
