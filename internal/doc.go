// Package internal holds what lies below every other package of gollm and is private to it: dtype
// conversion (internal/dtype), the CUDA device layer (internal/cuda), progress reports for long
// byte-counted tasks such as downloads and weight loads (internal/progress), and the one loop that
// spreads CPU work over the host's cores (internal/fanout). Nothing here imports a
// package above it; what serves the commands lives under cmd/, and what a Go program may use is in
// the public packages under engine/ and weights/.
package internal
