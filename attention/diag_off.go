//go:build !gollmdiag

package attention

// decodeDiag is empty in product builds: the kernels have no diagnostic cuts (decode.cuh compiles them
// only with DECODE_DIAG, in the gollmdiag build's fat binary; see diag_on.go).
type decodeDiag struct{}

// flags is the DECODE_FLAG_DIAG_* bits of a call: none.
func (decodeDiag) flags() int32 { return 0 }
