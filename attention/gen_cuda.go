package attention

// The GPU kernels (grouped.cu, splitk.cu, shared.cu, decode.cuh) compile to attention.fatbin, embedded by
// decode_cuda.go (build tag cuda). Regenerate after editing them (needs nvcc; see
// ../../shared/docs/gpu.md), and commit attention.fatbin with its stamp attention.fatbin.sha256:
//
//	go generate ./attention
//
//go:generate ../internal/cuda/build-fatbin.sh attention.fatbin decode.cuh grouped.cu splitk.cu shared.cu
