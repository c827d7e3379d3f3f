//go:build !gollmdiag

package model

// stepDiag is empty in product builds: the CUDA step has no diagnostic switches (diag_on.go has them,
// in builds with the gollmdiag tag).
type stepDiag struct{}

// skips reports whether the step leaves out the ops of kind k: never.
func (stepDiag) skips(opKind) bool { return false }

// normFold reports whether the fold diagnostic bit is set: never.
func (stepDiag) normFold(bit int) bool { return false }

// hash mixes the switches into a graph signature: nothing to mix.
func (stepDiag) hash(h uint64) uint64 { return h }
