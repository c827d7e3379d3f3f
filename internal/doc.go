// Package internal holds what is private to gollm: helpers below every other package (dtype conversion,
// the CUDA device layer) and the pieces of the commands that are too large for cmd/ (the OpenAI-compatible
// HTTP server, the embedded default model). Helpers below the engine never import the packages above them.
package internal
