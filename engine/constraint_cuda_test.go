//go:build cuda

package engine

import (
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights/weightstest"
)

// TestCUDAConstraintMatchesHost is checkMaskedMatchesHost on the GPU in float32 (the head-64 random
// model): constrained requests whose masks enter the device's pick (uploaded, then read by the
// sampling kernel beside the logits; pipelined steps committed after the previous step's tokens are
// read) give the tokens of the same requests drawn on the host from the same logits.
func TestCUDAConstraintMatchesHost(t *testing.T) {
	requireGPU(t)
	dir := t.TempDir()
	weightstest.WriteLlama(t, dir, cudaHead64Config, 7)
	checkMaskedMatchesHost(t, func() *model.Model { return loadCUDAModel(t, dir, "float32", 256, 16) })
}
