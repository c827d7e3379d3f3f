//go:build cuda

package cuda

import (
	"errors"

	"gorgonia.org/cu"
)

// contextLost are the driver's "sticky" errors, as gorgonia.org/cu returns them and as their CUresult
// codes (Result, this package's own calls): once one is returned, the context is unusable and every
// later call on it fails the same way; only a new process (a new context) recovers the device. They
// come from a kernel that faulted (an illegal address or instruction, a misaligned access, a stack
// overflow, a device-side assert), a launch that failed or timed out, uncorrectable ECC or NVLink
// errors, and a context destroyed or a driver shut down under the caller.
var contextLost = []struct {
	err  error
	code Result
}{
	{cu.IllegalAddress, Result(cu.IllegalAddress)}, {cu.LaunchFailed, Result(cu.LaunchFailed)},
	{cu.LaunchTimeout, Result(cu.LaunchTimeout)}, {cu.IllegalInstruction, Result(cu.IllegalInstruction)},
	{cu.MisalignedAddress, Result(cu.MisalignedAddress)}, {cu.InvalidAddressSpace, Result(cu.InvalidAddressSpace)},
	{cu.InvalidPc, Result(cu.InvalidPc)}, {cu.HardwareStackError, Result(cu.HardwareStackError)},
	{cu.Assert, Result(cu.Assert)}, {cu.EccUncorrectable, Result(cu.EccUncorrectable)},
	{cu.NvlinkUncorrectable, Result(cu.NvlinkUncorrectable)}, {cu.ContextIsDestroyed, Result(cu.ContextIsDestroyed)},
	{cu.Deinitialized, Result(cu.Deinitialized)},
}

// IsContextLost reports whether err holds one of the driver's sticky errors (see contextLost): the
// device's context cannot run anything any more. Other errors (out of memory, an invalid value, a
// launch out of resources) leave the context usable.
func IsContextLost(err error) bool {
	for _, lost := range contextLost {
		if errors.Is(err, lost.err) || errors.Is(err, lost.code) {
			return true
		}
	}
	return false
}
