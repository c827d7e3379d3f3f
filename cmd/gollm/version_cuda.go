//go:build cuda

package main

// cudaBuilt says whether this binary has the CUDA backend (built with -tags cuda).
const cudaBuilt = true
