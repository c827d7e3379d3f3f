// Package bench owns gollm's end-to-end benchmarks: the built-in model shapes (Preset), the roofline
// arithmetic (CountParams, DecodeStepBytes), the copy-bandwidth probe, and the three drivers behind
// `gollm bench latency | throughput | serve`, with their text, JSON and SVG reports.
//
//   - RunLatency times a fixed batch end to end through the engine: prefill time, then every decode
//     step (median and p90), each against the roofline (the bytes the step must read, weights plus
//     the KV cache at the step's context, over the copy bandwidth).
//   - RunThroughput pushes many requests through the engine's continuous batching at once: output,
//     total and request throughput.
//   - RunServe load-tests a running OpenAI-compatible server with streaming /v1/completions
//     requests, or an engine in process with the same requests: time to first token, inter-token
//     latency and end-to-end latency percentiles, per class for a mixed load of long and short
//     prompts.
//
// A model comes from LoadModel: a built-in shape or a model folder, with real or random weights
// (model.LoadRandom), on a Device. For example:
//
//	lm, err := bench.LoadModel(bench.ModelSpec{Config: "llama3.2-1b", Device: "cpu", NumBlocks: 64})
//	if err != nil { ... }
//	defer lm.Close()
//	res, err := bench.RunLatency(ctx, lm, bench.LatencyOptions{Batch: 1, InputLen: 128, OutputLen: 32})
//	res.WriteText(os.Stdout)
//
// This package measures; it must not change how the engine, the model or the server work, and it
// reaches them only through their public APIs (a wrapper around the model's Forward records step
// times). Nothing here runs during `go test` beyond tiny shapes.
package bench
