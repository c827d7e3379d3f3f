// Package kernels holds the CUDA kernels of package model's GPU backend, compiled by build.sh into one fat
// binary (model.fatbin, SASS for sm_80/86/89/90 plus compute_80 PTX) that Fatbin embeds when built with
// the cuda tag: embedding gather (scaled, for Gemma), RMSNorm fused with the residual add, RoPE fused with
// the KV-cache write (and the q/k norms), SwiGLU and GeGLU, row gather, greedy argmax, sampling (under
// token masks too: structured output), the families' q/k norms, biases, sublayer-output norms and logit soft cap,
// and the causal prefill attention of package attention (../../attention/prefill.cu); and, as PTX that
// the driver compiles at load (GemmSM90PTX: PTX ISA 8.0 for sm_90a, beyond what nvcc 11.8 compiles), the
// skinny GEMM of 9-64 token rows on the Hopper copy engine and wgmma (gemm_sm90.cu). It holds no Go
// logic: the launches live beside the code that uses them (../backend_cuda.go, ../gemm_cuda.go,
// ../mask_cuda.go, ../../attention/prefill_cuda.go).
//
// Regenerate after editing a kernel (needs nvcc; see ../../../shared/docs/gpu.md) and commit model.fatbin
// and gemm_sm90.ptx with their stamp model.fatbin.sha256, which CI compares with the sources
// (.ci/after.d/55-model-cuda.sh):
//
//	go generate ./model/kernels
package kernels

//go:generate ./build.sh
