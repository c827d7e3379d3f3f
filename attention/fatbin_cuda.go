//go:build cuda && !gollmdiag

package attention

import _ "embed"

// decodeFatbin holds the kernels of grouped.cu and splitk.cu (see gen_cuda.go).
//
//go:embed attention.fatbin
var decodeFatbin []byte
