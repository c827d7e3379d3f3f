//go:build cuda

package kernels

import _ "embed"

// Fatbin is model.fatbin: every kernel of this folder and ../../attention/prefill.cu, for
// cuda.Device.LoadModule.
//
//go:embed model.fatbin
var Fatbin []byte
