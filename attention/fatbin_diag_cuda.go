//go:build cuda && gollmdiag

package attention

import _ "embed"

// decodeFatbin holds the kernels of grouped.cu and splitk.cu built with their diagnostic cuts
// (DECODE_DIAG; see diag_on.go). Build it before a gollmdiag build; it is never committed:
//
//	go generate -tags gollmdiag ./attention
//
//go:generate env GOLLM_NVCC_FLAGS=-DDECODE_DIAG ../internal/cuda/build-fatbin.sh attention_diag.fatbin decode.cuh grouped.cu splitk.cu shared.cu
//go:embed attention_diag.fatbin
var decodeFatbin []byte
