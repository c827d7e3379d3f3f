package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/gollm/gollm/cmd/internal/bench"
	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/model"
)

// End-to-end benchmarks: gollm bench latency | throughput | serve. The measuring lives in
// cmd/internal/bench; this file parses flags, loads the model and prints.

// benchModelFlags are the flags that choose and place the model.
type benchModelFlags struct {
	config, modelDir string
	randomWeights    bool
	seed             uint64
	device           string
	pageSize         int
	verbose          bool
	cpuProfile       string
	noPipelining     bool
	quantization     string
	kvCacheDType     string
	sharedPrefix     string
	tensorParallel   int
}

func (f *benchModelFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "built-in model shape ("+strings.Join(bench.PresetNames(), ", ")+") or a config.json path; weights are random")
	fs.StringVar(&f.modelDir, "model", "", "model folder (config.json, *.safetensors, tokenizer.json)")
	fs.BoolVar(&f.randomWeights, "random-weights", false, "with --model: random weights of the folder's shape instead of its checkpoint")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the random weights and prompts")
	fs.StringVar(&f.device, "device", "cpu", "where the model runs: cpu or cuda")
	fs.IntVar(&f.pageSize, "page-size", model.DefaultBlockSize, "tokens per KV cache page")
	fs.BoolVar(&f.verbose, "verbose", false, "log the engine's progress to stderr")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the whole run to this file (go tool pprof)")
	fs.BoolVar(&f.noPipelining, "no-pipelining", false, "queue each decode step only after the previous step's tokens are read")
	fs.StringVar(&f.quantization, "quantization", "", "fp8: the layers' matrices as FP8 (e4m3) products, quantized at load")
	fs.StringVar(&f.kvCacheDType, "kv-cache-dtype", model.KVCacheAuto, "KV cache element type: auto or fp8 (e4m3)")
	fs.StringVar(&f.sharedPrefix, "shared-prefix", "auto", "decode attention over pages that sequences share: auto, off or always")
	fs.IntVar(&f.tensorParallel, "tensor-parallel-size", 1, "shard the model over this many GPUs with NCCL, or CPU ranks (must divide the attention heads)")
}

// spec checks the model flags and returns the load spec (without its KV size).
func (f *benchModelFlags) spec(stderr io.Writer) (bench.ModelSpec, error) {
	if (f.config == "") == (f.modelDir == "") {
		return bench.ModelSpec{}, errors.New("give exactly one of --config NAME and --model DIR")
	}
	if f.pageSize <= 0 {
		return bench.ModelSpec{}, fmt.Errorf("--page-size %d must be positive", f.pageSize)
	}
	switch f.sharedPrefix {
	case "auto", model.SharedPrefixOff, model.SharedPrefixAlways:
	default:
		return bench.ModelSpec{}, fmt.Errorf("--shared-prefix %q: supported: auto, off, always", f.sharedPrefix)
	}
	if f.tensorParallel < 1 {
		return bench.ModelSpec{}, fmt.Errorf("--tensor-parallel-size %d must be at least 1", f.tensorParallel)
	}
	dir := ""
	if f.modelDir != "" { // a model name becomes a folder where every command's does
		var err error
		if dir, err = llm.Resolve(f.modelDir); err != nil {
			return bench.ModelSpec{}, err
		}
	}
	return bench.ModelSpec{Config: f.config, Dir: dir, RandomWeights: f.randomWeights, Seed: f.seed,
		Device: f.device, BlockSize: f.pageSize, Progress: loadProgress(stderr),
		Quantization: f.quantization, KVCacheDType: f.kvCacheDType, SharedPrefix: f.sharedPrefix,
		TensorParallel: f.tensorParallel}, nil
}

// profile starts the CPU profile --cpuprofile asks for and returns the function that ends it (a no-op
// without the flag).
func (f *benchModelFlags) profile() (stop func(), err error) {
	if f.cpuProfile == "" {
		return func() {}, nil
	}
	file, err := os.Create(f.cpuProfile)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		file.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		file.Close()
	}, nil
}

func (f *benchModelFlags) logger(stderr io.Writer) *slog.Logger {
	if !f.verbose {
		return nil
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// ttyOrNil returns w when it is a terminal (progress bars go there), else nil.
func ttyOrNil(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return w
	}
	return nil
}

// parseBenchFlags parses args; it returns a exit code to return at once, or -1 to go on.
func parseBenchFlags(fs *pflag.FlagSet, name string, args []string, stderr io.Writer) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gollm bench %s: %v (see gollm bench %s --help)\n", name, err, name)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gollm bench %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	return -1
}

func newBenchFlagSet(name, usage string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("bench "+name, pflag.ContinueOnError)
	fs.SetNormalizeFunc(normalizeFlag)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gollm bench "+name+" "+usage)
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	return fs
}

func runBenchLatency(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newBenchFlagSet("latency", "(--config NAME | --model DIR [--random-weights]) --batch B[,B...] --input-len I[,I...] --output-len O [flags]", stderr)
	var mf benchModelFlags
	mf.register(fs)
	batchList := fs.String("batch", "1", "batch size, or a comma-separated sweep (1,2,4,8)")
	inputList := fs.String("input-len", "128", "prompt tokens per sequence, or a comma-separated sweep (8192,32768,131072)")
	outputLen := fs.Int("output-len", 32, "generated tokens per sequence (EOS ignored)")
	warmup := fs.Int("warmup", 1, "iterations run first and discarded")
	iters := fs.Int("iters", 3, "measured iterations per batch size")
	bandwidth := fs.Float64("bandwidth", 0, "roofline copy bandwidth in bytes/s (read+write); default: measured (the GPU's device-to-device copy on cuda, host memory on the CPU)")
	maxBatched := fs.Int("max-batched-tokens", 0, "engine's tokens per step, the prefill chunk (vLLM's --max-num-batched-tokens, also accepted); default the engine's")
	jsonOut := fs.Bool("json", false, "print one JSON object per batch size and input length instead of a table")
	plotPath := fs.String("plot", "", "write an SVG of throughput and step time against batch size (with the roofline) to this file")
	if code := parseBenchFlags(fs, "latency", args, stderr); code >= 0 {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "gollm bench latency: %v\n", err)
		return 1
	}
	batches, err := bench.ParseBatches(*batchList)
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench latency: --batch: %v\n", err)
		return 2
	}
	inputLens, err := bench.ParseLengths(*inputList)
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench latency: --input-len: %v\n", err)
		return 2
	}
	if *outputLen <= 0 || *iters <= 0 || *warmup < 0 || *maxBatched < 0 {
		fmt.Fprintln(stderr, "gollm bench latency: --output-len and --iters must be positive, --warmup and --max-batched-tokens not negative")
		return 2
	}
	if *plotPath != "" && len(inputLens) > 1 {
		fmt.Fprintln(stderr, "gollm bench latency: --plot draws one input length; give one --input-len")
		return 2
	}
	spec, err := mf.spec(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench latency: %v\n", err)
		return 2
	}
	// A sequence longer than the model's context is refused before the weights load.
	cfg, name, err := bench.ResolveConfig(spec)
	if err != nil {
		return fail(err)
	}
	if err := bench.CheckContext(cfg, name, maxInt(inputLens)+*outputLen); err != nil {
		return fail(err)
	}
	stopProfile, err := mf.profile()
	if err != nil {
		return fail(err)
	}
	defer stopProfile()
	spec.NumBlocks = bench.BlocksFor(maxInt(batches), maxInt(inputLens)+*outputLen, spec.BlockSize)
	lm, err := bench.LoadModel(spec)
	if err != nil {
		return fail(err)
	}
	defer lm.Close()
	bw, source := bench.ResolveBandwidth(lm.Device, *bandwidth)
	var results []*bench.LatencyResult
	for _, in := range inputLens {
		rs, err := bench.RunLatencySweep(ctx, lm, batches, bench.LatencyOptions{
			InputLen: in, OutputLen: *outputLen, Warmup: *warmup, Iterations: *iters, Seed: mf.seed,
			MaxNumBatchedTokens: *maxBatched, DisablePipelining: mf.noPipelining, Bandwidth: bw, BandwidthSource: source,
			Progress: ttyOrNil(stderr), Logger: mf.logger(stderr),
		})
		if err != nil {
			return fail(err)
		}
		if *jsonOut {
			enc := json.NewEncoder(stdout)
			for _, r := range rs {
				if err := enc.Encode(r); err != nil {
					return fail(err)
				}
			}
		} else if err := bench.WriteLatencyText(stdout, rs); err != nil {
			return fail(err)
		}
		results = append(results, rs...)
	}
	if *plotPath != "" {
		title := fmt.Sprintf("gollm %s on %s: input %d, output %d", lm.Name, lm.Device.Name, inputLens[0], *outputLen)
		if err := writePlot(*plotPath, title, results); err != nil {
			return fail(err)
		}
	}
	return 0
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func writePlot(path, title string, results []*bench.LatencyResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := bench.WriteLatencySVG(f, title, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func runBenchThroughput(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newBenchFlagSet("throughput", "(--config NAME | --model DIR [--random-weights]) --num-prompts N --input-len I[:J] --output-len O[:P] [flags]", stderr)
	var mf benchModelFlags
	mf.register(fs)
	numPrompts := fs.Int("num-prompts", 64, "requests in all")
	inputLen := fs.String("input-len", "128", "prompt tokens per request: N, or MIN:MAX drawn uniformly")
	outputLen := fs.String("output-len", "128", "generated tokens per request (EOS ignored): N, or MIN:MAX")
	maxNumSeqs := fs.Int("max-num-seqs", 256, "engine's most sequences running at once")
	maxBatched := fs.Int("max-batched-tokens", 0, "engine's tokens per step, the prefill chunk (vLLM's --max-num-batched-tokens, also accepted); default the engine's")
	kvBlocks := fs.Int("kv-blocks", 0, "KV cache pages (default: enough for max-num-seqs sequences of the longest request)")
	jsonOut := fs.Bool("json", false, "print a JSON object instead of text")
	bandwidth := fs.Float64("bandwidth", 0, "roofline copy bandwidth in bytes/s (read+write); default: measured on cuda (device-to-device copy), none on the CPU")
	peakFLOPS := fs.Float64("peak-flops", 0, "roofline matrix rate in FLOP/s; default: 8.08e14 on cuda (H100 cuBLAS bf16), none on the CPU")
	if code := parseBenchFlags(fs, "throughput", args, stderr); code >= 0 {
		return code
	}
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "gollm bench throughput: %v\n", err)
		return 2
	}
	in, err := bench.ParseRange(*inputLen)
	if err != nil {
		return usageErr(err)
	}
	out, err := bench.ParseRange(*outputLen)
	if err != nil {
		return usageErr(err)
	}
	if *numPrompts <= 0 || *maxNumSeqs <= 0 || *maxBatched < 0 || *kvBlocks < 0 {
		return usageErr(errors.New("--num-prompts and --max-num-seqs must be positive, --max-batched-tokens and --kv-blocks not negative"))
	}
	spec, err := mf.spec(stderr)
	if err != nil {
		return usageErr(err)
	}
	cfg, name, err := bench.ResolveConfig(spec)
	if err == nil {
		err = bench.CheckContext(cfg, name, in.Max+out.Max)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench throughput: %v\n", err)
		return 1
	}
	stopProfile, err := mf.profile()
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench throughput: %v\n", err)
		return 1
	}
	defer stopProfile()
	spec.NumBlocks = *kvBlocks
	if spec.NumBlocks <= 0 {
		spec.NumBlocks = bench.BlocksFor(min(*numPrompts, *maxNumSeqs), in.Max+out.Max, spec.BlockSize)
	}
	return throughput(ctx, spec, bench.ThroughputOptions{
		NumPrompts: *numPrompts, InputLen: in, OutputLen: out, Seed: mf.seed, MaxNumSeqs: *maxNumSeqs,
		MaxNumBatchedTokens: *maxBatched, DisablePipelining: mf.noPipelining, Progress: ttyOrNil(stderr), Logger: mf.logger(stderr),
		Bandwidth: *bandwidth, PeakFLOPS: *peakFLOPS,
	}, *jsonOut, stdout, stderr)
}

func throughput(ctx context.Context, spec bench.ModelSpec, opts bench.ThroughputOptions, jsonOut bool, stdout, stderr io.Writer) int {
	lm, err := bench.LoadModel(spec)
	if err == nil {
		defer lm.Close()
		var res *bench.ThroughputResult
		if res, err = bench.RunThroughput(ctx, lm, opts); err == nil {
			if jsonOut {
				err = json.NewEncoder(stdout).Encode(res)
			} else {
				err = res.WriteText(stdout)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench throughput: %v\n", err)
		return 1
	}
	return 0
}

func runBenchServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newBenchFlagSet("serve", "(--url URL | --config NAME | --model DIR) --concurrency C --num-prompts N [--input-len I[:J]] [--output-len O[:P]] [--long-fraction F --long-input-len L[:M]] [flags]", stderr)
	url := fs.String("url", "http://127.0.0.1:8000", "base URL of a running gollm serve (or any OpenAI-compatible server)")
	var mf benchModelFlags // --config or --model: the engine in process instead of a server
	mf.register(fs)
	modelName := fs.String("model-name", "", "the requests' model field (default: the first model GET /v1/models lists)")
	apiKey := fs.String("api-key", "", "bearer token to send")
	concurrency := fs.Int("concurrency", 8, "requests in flight at once")
	numPrompts := fs.Int("num-prompts", 64, "requests in all")
	inputLen := fs.String("input-len", "128", "prompt tokens per request: N, or MIN:MAX drawn uniformly")
	outputLen := fs.String("output-len", "128", "generated tokens per request (ignore_eos): N, or MIN:MAX")
	longFraction := fs.Float64("long-fraction", 0, "share of the requests, drawn at random, with long prompts (--long-input-len): a mixed load, reported per class")
	longInputLen := fs.String("long-input-len", "", "prompt tokens of the long requests: N, or MIN:MAX drawn uniformly")
	vocab := fs.Int("vocab-size", 1000, "prompt token ids are drawn from [0, vocab-size) (in process: the model's vocabulary)")
	maxNumSeqs := fs.Int("max-num-seqs", 256, "in process: the engine's most sequences running at once")
	maxBatched := fs.String("max-batched-tokens", "", "in process: the engine's tokens per step, the prefill chunk (vLLM's --max-num-batched-tokens, also accepted), or a comma-separated sweep (2048,8192), the same load at each; default the engine's")
	kvBlocks := fs.Int("kv-blocks", 0, "in process: KV cache pages (default: enough for the requests in flight at their longest)")
	threshold := fs.Int("long-prefill-token-threshold", 0, "in process: most tokens of one prompt's prefill chunk in a step, below --max-batched-tokens (0: no cap)")
	sharedPrefix := fs.Int("shared-prefix-len", 0, "tokens of one system prompt put before every request's own input-len tokens")
	jsonOut := fs.Bool("json", false, "print a JSON object instead of text")
	if code := parseBenchFlags(fs, "serve", args, stderr); code >= 0 {
		return code
	}
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "gollm bench serve: %v\n", err)
		return 2
	}
	in, err := bench.ParseRange(*inputLen)
	var out, long bench.Range
	if err == nil {
		out, err = bench.ParseRange(*outputLen)
	}
	switch {
	case err != nil:
	case (*longFraction > 0) != (*longInputLen != ""):
		err = errors.New("a mixed load needs both --long-fraction (above 0) and --long-input-len")
	case *longInputLen != "":
		if long, err = bench.ParseRange(*longInputLen); err != nil {
			err = fmt.Errorf("--long-input-len: %w", err)
		}
	}
	if err != nil {
		return usageErr(err)
	}
	opts := bench.ServeOptions{
		URL: *url, Model: *modelName, APIKey: *apiKey, Concurrency: *concurrency, NumPrompts: *numPrompts,
		InputLen: in, OutputLen: out, SharedPrefixLen: *sharedPrefix, VocabSize: *vocab, Seed: mf.seed,
		Progress: ttyOrNil(stderr), LongFraction: *longFraction, LongInputLen: long,
	}
	if mf.config == "" && mf.modelDir == "" {
		if names := changedFlags(fs, inProcessServeFlags); len(names) > 0 {
			return usageErr(fmt.Errorf("%s configure an engine in process (--config or --model); a server has its own", names))
		}
		return serveReport(ctx, opts, 0, 0, *jsonOut, stdout, stderr)
	}
	if names := changedFlags(fs, []string{"url", "model-name", "api-key", "vocab-size"}); len(names) > 0 {
		return usageErr(fmt.Errorf("%s are for a server; --config and --model run the engine in process (its prompts draw from the model's vocabulary)", names))
	}
	budgets := []int{engine.DefaultMaxNumBatchedTokens}
	if fs.Changed("max-batched-tokens") {
		if budgets, err = bench.ParseLengths(*maxBatched); err != nil {
			return usageErr(fmt.Errorf("--max-batched-tokens: %w", err))
		}
	}
	if *concurrency <= 0 || *maxNumSeqs <= 0 || *kvBlocks < 0 || *threshold < 0 {
		return usageErr(errors.New("--concurrency and --max-num-seqs must be positive, --kv-blocks and --long-prefill-token-threshold not negative"))
	}
	spec, err := mf.spec(stderr)
	if err != nil {
		return usageErr(err)
	}
	longest := *sharedPrefix + max(in.Max, long.Max) + out.Max
	cfg, name, err := bench.ResolveConfig(spec)
	if err == nil {
		err = bench.CheckContext(cfg, name, longest)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench serve: %v\n", err)
		return 1
	}
	spec.NumBlocks = *kvBlocks
	if spec.NumBlocks <= 0 {
		spec.NumBlocks = bench.BlocksFor(min(*concurrency, *maxNumSeqs), longest, spec.BlockSize)
	}
	lm, err := bench.LoadModel(spec)
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench serve: %v\n", err)
		return 1
	}
	defer lm.Close()
	stopProfile, err := mf.profile()
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench serve: %v\n", err)
		return 1
	}
	defer stopProfile()
	logger := mf.logger(stderr)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts.Model, opts.VocabSize = lm.Name, lm.Config.VocabSize
	code := 0
	// One engine per budget over the same model: the same requests (the same seed) at each prefill chunk.
	for _, budget := range budgets {
		budget = max(budget, *maxNumSeqs) // as engine.New raises it
		e, err := engine.New(lm.Model, lm.Tokenizer, engine.Config{MaxNumSeqs: *maxNumSeqs, MaxNumBatchedTokens: budget,
			LongPrefillTokenThreshold: *threshold, DisablePipelining: mf.noPipelining, Logger: logger})
		if err != nil {
			fmt.Fprintf(stderr, "gollm bench serve: %v\n", err)
			return 1
		}
		opts.Engine = e
		code = max(code, serveReport(ctx, opts, budget, *threshold, *jsonOut, stdout, stderr))
		e.Close(context.Background())
	}
	return code
}

// inProcessServeFlags are bench serve's flags that configure the engine it runs in process (--config
// or --model): a server given by --url has its own configuration, so they are refused with it.
var inProcessServeFlags = []string{"max-batched-tokens", "max-num-seqs", "kv-blocks", "long-prefill-token-threshold",
	"random-weights", "device", "page-size", "verbose", "cpuprofile", "no-pipelining", "quantization", "kv-cache-dtype",
	"shared-prefix", "tensor-parallel-size"}

// changedFlags returns the flags of names that the command line set, as "--a, --b" (empty when none).
func changedFlags(fs *pflag.FlagSet, names []string) string {
	var set []string
	for _, n := range names {
		if fs.Changed(n) {
			set = append(set, "--"+n)
		}
	}
	return strings.Join(set, ", ")
}

// serveReport runs a bench serve load and prints its result; budget and threshold are the in-process
// engine's token budget per step and chunk cap (0 for a server). It returns the command's exit code.
func serveReport(ctx context.Context, opts bench.ServeOptions, budget, threshold int, jsonOut bool, stdout, stderr io.Writer) int {
	res, err := bench.RunServe(ctx, opts)
	if err == nil {
		res.MaxNumBatchedTokens, res.LongPrefillTokenThreshold = budget, threshold
		if jsonOut {
			err = json.NewEncoder(stdout).Encode(res)
		} else {
			err = res.WriteText(stdout)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench serve: %v\n", err)
		if errors.Is(err, bench.ErrInvalidOptions) {
			return 2
		}
		return 1
	}
	if res.Failed > 0 {
		return 1
	}
	return 0
}
