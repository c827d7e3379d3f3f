//go:build gollmdiag

package model

// stepDiag holds the CUDA step's diagnostic switches, in builds with the gollmdiag tag only: they make
// the results wrong, so that a benchmark times the step without a part of it (BenchmarkCUDADecode's
// diagnostic variants, bench_diag_cuda_test.go).
type stepDiag struct {
	// Skip leaves the ops of these profile names ("norm", "attention", …) out of the step (a folded norm
	// has no kernel to leave out).
	Skip []string
	// NormFold: bit 1 the product after a folded norm does not read the sums of squares, bit 2 the
	// product before it writes neither them nor the norm's input, bit 4 the norm's kernel runs as well,
	// bit 8 the product before it lets the next launch early.
	NormFold int
}

// skips reports whether the step leaves out the ops of kind k.
func (d stepDiag) skips(k opKind) bool {
	for _, name := range d.Skip {
		if name == k.String() {
			return true
		}
	}
	return false
}

// normFold reports whether NormFold has bit set.
func (d stepDiag) normFold(bit int) bool { return d.NormFold&bit != 0 }

// hash mixes the switches into a graph signature.
func (d stepDiag) hash(h uint64) uint64 {
	h = fnvWord(h, uint64(d.NormFold))
	for _, name := range d.Skip {
		h = fnvString(h, "skip "+name)
	}
	return h
}
