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
}

// spec checks the model flags and returns the load spec (without its KV size).
func (f *benchModelFlags) spec(stderr io.Writer) (bench.ModelSpec, error) {
	if (f.config == "") == (f.modelDir == "") {
		return bench.ModelSpec{}, errors.New("give exactly one of --config NAME and --model DIR")
	}
	if f.pageSize <= 0 {
		return bench.ModelSpec{}, fmt.Errorf("--page-size %d must be positive", f.pageSize)
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
		Quantization: f.quantization, KVCacheDType: f.kvCacheDType}, nil
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
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gollm bench "+name+" "+usage)
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	return fs
}

func runBenchLatency(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newBenchFlagSet("latency", "(--config NAME | --model DIR [--random-weights]) --batch B[,B...] --input-len I --output-len O [flags]", stderr)
	var mf benchModelFlags
	mf.register(fs)
	batchList := fs.String("batch", "1", "batch size, or a comma-separated sweep (1,2,4,8)")
	inputLen := fs.Int("input-len", 128, "prompt tokens per sequence")
	outputLen := fs.Int("output-len", 32, "generated tokens per sequence (EOS ignored)")
	warmup := fs.Int("warmup", 1, "iterations run first and discarded")
	iters := fs.Int("iters", 3, "measured iterations per batch size")
	bandwidth := fs.Float64("bandwidth", 0, "roofline copy bandwidth in bytes/s (read+write); default: measured (the GPU's device-to-device copy on cuda, host memory on the CPU)")
	maxBatched := fs.Int("max-batched-tokens", 0, "engine's tokens per step (chunked prefill); default the engine's")
	jsonOut := fs.Bool("json", false, "print one JSON object per batch size instead of a table")
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
	if *inputLen <= 0 || *outputLen <= 0 || *iters <= 0 || *warmup < 0 {
		fmt.Fprintln(stderr, "gollm bench latency: --input-len, --output-len and --iters must be positive, --warmup not negative")
		return 2
	}
	spec, err := mf.spec(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench latency: %v\n", err)
		return 2
	}
	stopProfile, err := mf.profile()
	if err != nil {
		return fail(err)
	}
	defer stopProfile()
	spec.NumBlocks = bench.BlocksFor(maxInt(batches), *inputLen+*outputLen, spec.BlockSize)
	lm, err := bench.LoadModel(spec)
	if err != nil {
		return fail(err)
	}
	defer lm.Close()
	bw, source := bench.ResolveBandwidth(lm.Device, *bandwidth)
	results, err := bench.RunLatencySweep(ctx, lm, batches, bench.LatencyOptions{
		InputLen: *inputLen, OutputLen: *outputLen, Warmup: *warmup, Iterations: *iters, Seed: mf.seed,
		MaxNumBatchedTokens: *maxBatched, DisablePipelining: mf.noPipelining, Bandwidth: bw, BandwidthSource: source,
		Progress: ttyOrNil(stderr), Logger: mf.logger(stderr),
	})
	if err != nil {
		return fail(err)
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return fail(err)
			}
		}
	} else if err := bench.WriteLatencyText(stdout, results); err != nil {
		return fail(err)
	}
	if *plotPath != "" {
		title := fmt.Sprintf("gollm %s on %s: input %d, output %d", lm.Name, lm.Device.Name, *inputLen, *outputLen)
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
	maxBatched := fs.Int("max-batched-tokens", 0, "engine's tokens per step (chunked prefill); default the engine's")
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
	if *numPrompts <= 0 || *maxNumSeqs <= 0 {
		return usageErr(errors.New("--num-prompts and --max-num-seqs must be positive"))
	}
	spec, err := mf.spec(stderr)
	if err != nil {
		return usageErr(err)
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
	fs := newBenchFlagSet("serve", "--url URL --concurrency C --num-prompts N [--input-len I[:J]] [--output-len O[:P]] [flags]", stderr)
	url := fs.String("url", "http://127.0.0.1:8000", "base URL of a running gollm serve (or any OpenAI-compatible server)")
	modelName := fs.String("model-name", "", "the requests' model field (default: the first model GET /v1/models lists)")
	apiKey := fs.String("api-key", "", "bearer token to send")
	concurrency := fs.Int("concurrency", 8, "requests in flight at once")
	numPrompts := fs.Int("num-prompts", 64, "requests in all")
	inputLen := fs.String("input-len", "128", "prompt tokens per request: N, or MIN:MAX drawn uniformly")
	outputLen := fs.String("output-len", "128", "generated tokens per request (ignore_eos): N, or MIN:MAX")
	vocab := fs.Int("vocab-size", 1000, "prompt token ids are drawn from [0, vocab-size)")
	sharedPrefix := fs.Int("shared-prefix-len", 0, "tokens of one system prompt put before every request's own input-len tokens")
	seed := fs.Uint64("seed", 0, "seed of the prompts")
	jsonOut := fs.Bool("json", false, "print a JSON object instead of text")
	if code := parseBenchFlags(fs, "serve", args, stderr); code >= 0 {
		return code
	}
	in, err := bench.ParseRange(*inputLen)
	var out bench.Range
	if err == nil {
		out, err = bench.ParseRange(*outputLen)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench serve: %v\n", err)
		return 2
	}
	res, err := bench.RunServe(ctx, bench.ServeOptions{
		URL: *url, Model: *modelName, APIKey: *apiKey, Concurrency: *concurrency, NumPrompts: *numPrompts,
		InputLen: in, OutputLen: out, SharedPrefixLen: *sharedPrefix, VocabSize: *vocab, Seed: *seed, Progress: ttyOrNil(stderr),
	})
	if err == nil {
		if *jsonOut {
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
