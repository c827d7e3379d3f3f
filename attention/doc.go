// Package attention owns the paged KV layout, the KV write by slot mapping, causal prefill attention over
// pages and decode attention (the grouped and split-k algorithms and the pure dispatcher that picks one).
// The CPU code here is the specification of the GPU kernels. It must not know about sequences' lifetimes,
// scheduling or sampling.
package attention
