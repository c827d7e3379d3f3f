// Package model owns the LLaMA-family forward pass, written once against a Backend (the pure-Go CPU
// reference, or CUDA), and the sampler. It knows tensors, layers and batch metadata; it must not know
// about requests, queues or HTTP.
package model
