package main

import (
	"context"
	"fmt"
	"io"
	"sort"
)

// benchSubcommands are the measurements under gollm bench. attention is the decode-attention kernel grid
// (bench_attention*.go; it needs the cuda build); the others arrive with the engine benchmarks.
var benchSubcommands = map[string]struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}{
	"attention":  {"time the decode-attention kernels on the GPU over a grid of shapes", runBenchAttention},
	"latency":    {"time a batch end to end: prefill, decode steps, roofline", runBenchLatency},
	"throughput": {"offline throughput over many requests", runBenchThroughput},
	"serve":      {"load-test a running server", runBenchServe},
}

func init() {
	register("bench", "measure kernels, latency and throughput (gollm bench <what>)", runBench)
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: gollm bench <what> [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(benchSubcommands))
	for n := range benchSubcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, benchSubcommands[n].summary)
	}
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		benchUsage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub, ok := benchSubcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gollm bench: unknown benchmark %q\n", args[0])
		benchUsage(stderr)
		return 2
	}
	return sub.run(ctx, args[1:], stdout, stderr)
}

func benchNotYet(name string) func(context.Context, []string, io.Writer, io.Writer) int {
	return func(_ context.Context, _ []string, _, stderr io.Writer) int {
		fmt.Fprintf(stderr, "gollm bench %s: not implemented yet\n", name)
		return 2
	}
}
