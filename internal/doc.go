// Package internal holds private helpers below every other package (dtype conversion, the CUDA device
// layer). Nothing here may import the packages above it.
package internal
