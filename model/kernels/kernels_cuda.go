//go:build cuda

package kernels

import _ "embed"

// Fatbin is model.fatbin: every kernel of this folder and ../../attention/prefill.cu, for
// cuda.Device.LoadModule.
//
//go:embed model.fatbin
var Fatbin []byte

// GemmSM90PTX is gemm_sm90.ptx: the skinny GEMM of gemm_sm90.cu as PTX ISA 8.0 for compute_90 (bulk
// copies), compiled by the driver at load (nvcc 11.8 here cannot emit SASS for it), NUL-terminated for
// cuda.Device.LoadModule.
//
//go:embed gemm_sm90.ptx
var GemmSM90PTX []byte

// FP8SM90PTX is fp8_sm90.ptx: the FP8 product on Hopper's e4m3 mma.sync (MatMulE4M3mma_nt1) as PTX ISA
// 8.4 for sm_90, compiled by the driver at load, NUL-terminated for cuda.Device.LoadModule.
//
//go:embed fp8_sm90.ptx
var FP8SM90PTX []byte

// PrefillSM90PTX is prefill_sm90.ptx: the Hopper prefill attention of ../../attention/prefill_sm90.cu
// (wgmma) as PTX ISA 8.0 for sm_90a, compiled by the driver at load, NUL-terminated for
// cuda.Device.LoadModule.
//
//go:embed prefill_sm90.ptx
var PrefillSM90PTX []byte
