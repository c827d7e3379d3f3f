// Package engine owns a running model: requests enter through Add, one goroutine runs the step loop
// (schedule, build batch metadata, model forward, sample, postprocess) and tokens leave through
// per-request streams. It must not know about HTTP or command-line flags.
package engine
