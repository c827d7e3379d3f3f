//go:build cuda

package model

// Test helpers: a step ended by PickAsync and waited for at once.

// ArgmaxToHost runs the step and writes into dst[r] the index of the largest entry of src's row r (the
// first on ties): PickAsync without sampling parameters, waited for.
func (b *cudaBackend) ArgmaxToHost(dst []int32, src Tensor) error { return b.pickNow(dst, src, nil) }

// SampleToHost runs the step and writes into dst[r] the token drawn from src's row r under params[r]:
// PickAsync, waited for.
func (b *cudaBackend) SampleToHost(dst []int32, src Tensor, params []SampleParams) error {
	if params == nil {
		params = []SampleParams{}
	}
	return b.pickNow(dst, src, params)
}

func (b *cudaBackend) pickNow(dst []int32, src Tensor, params []SampleParams) error {
	wait, err := b.PickAsync(dst, src, params)
	if err != nil {
		return err
	}
	return wait()
}
