//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"testing"

	"gorgonia.org/cu"
)

// TestIsContextLost classifies wrapped driver errors of both origins (gorgonia.org/cu's and Result):
// faults of a kernel, a failed launch and uncorrectable hardware errors lose the context; running out
// of memory or resources, or an invalid value, does not.
func TestIsContextLost(t *testing.T) {
	for _, tc := range []struct {
		err  error
		lost bool
	}{
		{cu.IllegalAddress, true},
		{fmt.Errorf("cuda backend: step: %w", cu.LaunchFailed), true},
		{fmt.Errorf("graph: %w", Result(cu.IllegalAddress)), true},
		{errors.Join(errors.New("sync"), fmt.Errorf("x: %w", Result(cu.MisalignedAddress))), true},
		{Result(cu.EccUncorrectable), true},
		{cu.OutOfMemory, false},
		{fmt.Errorf("alloc: %w", Result(cu.OutOfMemory)), false},
		{cu.LaunchOutOfResources, false},
		{Result(cu.InvalidValue), false},
		{errors.New("cuda backend: 3 sampling parameters for 2 rows"), false},
		{nil, false},
	} {
		if got := IsContextLost(tc.err); got != tc.lost {
			t.Errorf("IsContextLost(%v) = %v, want %v", tc.err, got, tc.lost)
		}
	}
}
