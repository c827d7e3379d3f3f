package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/tokenizer"
)

func init() {
	register("generate", "generate text from a prompt, or from a JSONL file of prompts", runGenerate)
}

// generateOptions are the parsed flags of gollm generate.
type generateOptions struct {
	modelDir    string
	prompt      string
	promptIDs   string
	promptsFile string
	maxTokens   int
	jsonOut     bool
	stop        []string
	ignoreEOS   bool
	verbose     bool
	constrain   constraintFlags

	// Sampling flags, applied over generation_config.json only when given.
	temperature, topP, minP                              float64
	topK                                                 int
	seed                                                 uint64
	repetitionPenalty, presencePenalty, frequencyPenalty float64

	maxNumSeqs, maxBatchedTokens, kvBlocks, pageSize, maxModelLen int
	longPrefillThreshold, tensorParallel                          int
	noPrefixCache, noPipelining, skipWeightCheck                  bool
	device, quantization, kvCacheDType, sharedPrefix              string
}

// flagAliases are other spellings the commands accept for their flags: vLLM's names, where ours
// differ.
var flagAliases = map[string]string{"max-num-batched-tokens": "max-batched-tokens"}

// normalizeFlag is the commands' pflag normalization: an alias becomes the flag's own name.
func normalizeFlag(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if n, ok := flagAliases[name]; ok {
		name = n
	}
	return pflag.NormalizedName(name)
}

// addEngineFlags registers the model and engine flags that gollm generate and gollm serve share.
func addEngineFlags(fs *pflag.FlagSet, o *generateOptions) {
	fs.SetNormalizeFunc(normalizeFlag)
	fs.StringVar(&o.device, "device", model.DeviceAuto, "where the model runs: cuda, cpu, or auto (cuda when this binary was built with -tags cuda and a GPU is there)")
	fs.IntVar(&o.maxNumSeqs, "max-num-seqs", engine.DefaultMaxNumSeqs, "maximum sequences running at once")
	fs.IntVar(&o.maxBatchedTokens, "max-batched-tokens", engine.DefaultMaxNumBatchedTokens, "maximum tokens per step: a longer prompt is prefilled in chunks of this many tokens (vLLM's --max-num-batched-tokens, also accepted)")
	fs.IntVar(&o.longPrefillThreshold, "long-prefill-token-threshold", 0, "most tokens of one prompt's prefill chunk in a step (vLLM's): short prompts behind a long one start sooner, the long one takes more steps (0: no cap)")
	fs.IntVar(&o.kvBlocks, "kv-blocks", 0, "KV cache pages (default: sized from available memory; on a GPU, 90% of its memory after the weights)")
	fs.IntVar(&o.pageSize, "page-size", model.DefaultBlockSize, "tokens per KV cache page")
	fs.IntVar(&o.maxModelLen, "max-model-len", 0, "most tokens (prompt plus output) of one request (default: the model's max_position_embeddings, or what the KV cache holds if less)")
	fs.BoolVar(&o.noPrefixCache, "no-prefix-cache", false, "do not reuse the KV of shared prompt prefixes")
	fs.BoolVar(&o.noPipelining, "no-pipelining", false, "queue each decode step only after the previous step's tokens are read (default: the next step is queued while one runs)")
	fs.BoolVar(&o.skipWeightCheck, "skip-weight-check", false, "do not scan the weights for NaN and infinities while loading (saves a pass over a large checkpoint)")
	fs.StringVar(&o.quantization, "quantization", "", "fp8: run the Linear layers as FP8 (e4m3) products, quantizing a float checkpoint at load (one scale per output row; the LM head kept); FP8 checkpoints run as FP8 without it")
	fs.StringVar(&o.kvCacheDType, "kv-cache-dtype", model.KVCacheAuto, "KV cache element type: auto (the device's) or fp8 (e4m3 with the checkpoint's per-layer k/v scales, else 1.0)")
	fs.StringVar(&o.sharedPrefix, "shared-prefix", "auto", "decode attention over prompt pages that running requests share: auto (read once for all of them where that pays), off or always (to compare the two in benchmarks)")
	fs.IntVar(&o.tensorParallel, "tensor-parallel-size", 1, "shard the model over this many GPUs with NCCL, or CPU ranks (must divide the attention heads)")
}

// checkEngineFlags refuses engine flags out of range, and resolves --device (printing why the CPU is
// used when it was not asked for), before anything loads.
func checkEngineFlags(o *generateOptions, stderr io.Writer) error {
	for _, f := range []struct {
		name  string
		value int
		min   int
	}{{"kv-blocks", o.kvBlocks, 0}, {"page-size", o.pageSize, 1}, {"max-num-seqs", o.maxNumSeqs, 1},
		{"max-batched-tokens", o.maxBatchedTokens, 1}, {"max-model-len", o.maxModelLen, 0},
		{"long-prefill-token-threshold", o.longPrefillThreshold, 0}, {"tensor-parallel-size", o.tensorParallel, 1}} {
		if f.value < f.min {
			return fmt.Errorf("--%s %d must be at least %d", f.name, f.value, f.min)
		}
	}
	if o.quantization != "" && o.quantization != model.QuantizationFP8 {
		return fmt.Errorf("--quantization %q: supported: %s", o.quantization, model.QuantizationFP8)
	}
	switch o.kvCacheDType {
	case model.KVCacheAuto, model.KVCacheFP8, "fp8_e4m3":
	default:
		return fmt.Errorf("--kv-cache-dtype %q: supported: auto, fp8 (e4m3)", o.kvCacheDType)
	}
	switch o.sharedPrefix {
	case "auto", model.SharedPrefixOff, model.SharedPrefixAlways:
	default:
		return fmt.Errorf("--shared-prefix %q: supported: auto, off, always", o.sharedPrefix)
	}
	if o.kvBlocks > 0 && o.maxModelLen > 0 && o.kvBlocks*o.pageSize < o.maxModelLen {
		return fmt.Errorf("--max-model-len %d does not fit the KV cache (%d pages of %d tokens); give more --kv-blocks or a smaller --max-model-len",
			o.maxModelLen, o.kvBlocks, o.pageSize)
	}
	device, notice, err := model.ResolveDevice(o.device)
	if err != nil {
		return err
	}
	if notice != "" {
		fmt.Fprintln(stderr, notice)
	}
	o.device = device
	return nil
}

// loadModel loads a model for the commands: llm.Load, which returns as soon as ctx ends even where the
// load itself cannot stop at once. Tests replace it to hold a load where it starts.
var loadModel = llm.Load

// loadHint is what the user can do about a model that does not fit, in flags; kvBlocks is the
// --kv-blocks given (0: the cache sized from the memory the weights leave).
func loadHint(err error, kvBlocks int) string {
	switch { // the KV pages asked for: llm.ErrDoesNotFit wraps model.ErrKVTooLarge then
	case errors.Is(err, model.ErrKVTooLarge) && kvBlocks > 0:
		return " (give fewer --kv-blocks, or leave --kv-blocks out to size the cache from memory)"
	case errors.Is(err, model.ErrKVTooLarge): // sized from memory: the weights left none for one page
		return " (the weights leave no memory for the KV cache: load fewer bytes of weights a GPU with --quantization fp8 or --tensor-parallel-size, or use a device with more memory)"
	case errors.Is(err, llm.ErrDoesNotFit):
		return " (choose the KV cache's size with --kv-blocks, or a smaller --max-model-len)"
	}
	return ""
}

// llmConfig is the model and engine configuration the flags give.
func (o *generateOptions) llmConfig(log *slog.Logger, stderr io.Writer) llm.Config {
	return llm.Config{Device: o.device, KVBlocks: o.kvBlocks, PageSize: o.pageSize, MaxModelLen: o.maxModelLen,
		MaxNumSeqs: o.maxNumSeqs, MaxBatchedTokens: o.maxBatchedTokens, LongPrefillTokenThreshold: o.longPrefillThreshold,
		DisablePrefixCache: o.noPrefixCache,
		DisablePipelining:  o.noPipelining, Logger: log, Progress: loadProgress(stderr), SkipWeightCheck: o.skipWeightCheck,
		Quantization: o.quantization, KVCacheDType: o.kvCacheDType, SharedPrefix: o.sharedPrefix,
		TensorParallel: o.tensorParallel}
}

// checkSamplingFlags refuses the sampling flags given that are out of range, before the model loads
// (the engine would refuse them too, after it).
func checkSamplingFlags(fs *pflag.FlagSet, o *generateOptions) error {
	if fs.Changed("max-tokens") && o.maxTokens < 1 {
		return fmt.Errorf("--max-tokens %d must be at least 1", o.maxTokens)
	}
	var p engine.SamplingParams
	applySamplingFlags(fs, o, &p)
	if err := p.Validate(); err != nil {
		return err
	}
	return nil
}

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("generate", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o generateOptions
	fs.StringVar(&o.modelDir, "model", "", "model folder (config.json, *.safetensors, tokenizer.json), or a Hugging Face name ORG/NAME[@REVISION] in its cache (see gollm pull); default: the built-in "+defaultmodel.Name()+" model")
	fs.StringVar(&o.prompt, "prompt", "", "prompt text (encoded with the model's special tokens, e.g. BOS); the same as the PROMPT argument")
	fs.StringVar(&o.promptIDs, "prompt-ids", "", "prompt as comma-separated token ids, e.g. 1,2,3")
	fs.StringVar(&o.promptsFile, "prompts-file", "", "JSONL file, one request per line ({\"prompt\": ...} or {\"prompt_ids\": [...]}, plus OpenAI sampling fields); writes one JSON line per request, in order")
	fs.IntVar(&o.maxTokens, "max-tokens", 0, fmt.Sprintf("maximum tokens to generate (default: generation_config.json's max_new_tokens, else %d)", llm.DefaultMaxTokens))
	fs.Float64Var(&o.temperature, "temperature", 0, "sampling temperature; 0 is greedy (default: generation_config.json's, else 1)")
	fs.Float64Var(&o.topP, "top-p", 0, "nucleus sampling: keep the most likely tokens up to this probability mass (default: generation_config.json's, else 1: off)")
	fs.IntVar(&o.topK, "top-k", 0, "keep only the k most likely tokens (default: generation_config.json's, else 0: all)")
	fs.Float64Var(&o.minP, "min-p", 0, "drop tokens less likely than min-p times the most likely one (default: generation_config.json's, else 0: off)")
	fs.Float64Var(&o.repetitionPenalty, "repetition-penalty", 0, "penalise tokens of the prompt and output, HF style (default: generation_config.json's, else 1: off)")
	fs.Float64Var(&o.presencePenalty, "presence-penalty", 0, "subtract from the logits of tokens already generated")
	fs.Float64Var(&o.frequencyPenalty, "frequency-penalty", 0, "subtract per occurrence from the logits of tokens already generated")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (default: a random one)")
	fs.StringArrayVar(&o.stop, "stop", nil, "stop string (repeatable); the text stops before it")
	fs.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating past end-of-sequence tokens")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object (prompt_ids, output_ids, text, finish_reason, timings) instead of streaming text (--prompts-file always writes JSON lines)")
	o.constrain.register(fs)
	addEngineFlags(fs, &o)
	fs.BoolVar(&o.verbose, "verbose", false, "log the engine's progress to stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gollm generate [--model DIR] [flags] PROMPT")
		fmt.Fprintln(stderr, "       gollm generate [--model DIR] [flags] (--prompt TEXT | --prompt-ids 1,2,3 | --prompts-file FILE.jsonl)")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gollm generate: %v (see gollm generate --help)\n", err)
		return 2
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "gollm generate: want one PROMPT argument (quote it), got %d\n", fs.NArg())
		return 2
	}
	textPrompt := fs.Changed("prompt")
	inputs := fs.NArg()
	for _, name := range []string{"prompt", "prompt-ids", "prompts-file"} {
		if fs.Changed(name) {
			inputs++
		}
	}
	if inputs != 1 {
		fmt.Fprintln(stderr, "gollm generate: give exactly one of PROMPT, --prompt, --prompt-ids or --prompts-file")
		return 2
	}
	if fs.NArg() == 1 {
		o.prompt, textPrompt = fs.Arg(0), true
	}
	if err := checkSamplingFlags(fs, &o); err != nil {
		fmt.Fprintf(stderr, "gollm generate: %v\n", err)
		return 2
	}
	spec, err := o.constrain.spec(fs)
	if err != nil {
		fmt.Fprintf(stderr, "gollm generate: %v\n", err)
		return 2
	}
	if err := checkEngineFlags(&o, stderr); err != nil {
		fmt.Fprintf(stderr, "gollm generate: %v\n", err)
		if errors.Is(err, model.ErrNoCUDA) {
			return 1
		}
		return 2
	}
	var promptIDs []int32
	if fs.Changed("prompt-ids") {
		var err error
		if promptIDs, err = parseIDs(o.promptIDs); err != nil {
			fmt.Fprintf(stderr, "gollm generate: --prompt-ids: %v\n", err)
			return 2
		}
	}
	var batch []byte // --prompts-file's lines, read before the model loads
	if o.promptsFile != "" {
		var err error
		if batch, err = os.ReadFile(o.promptsFile); err != nil {
			fmt.Fprintf(stderr, "gollm generate: --prompts-file: %v\n", err)
			return 2
		}
	}

	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	start := time.Now()
	m, err := loadModel(ctx, o.modelDir, o.llmConfig(log, stderr))
	if err != nil {
		if ctx.Err() != nil { // a signal (the first SIGINT or SIGTERM) while the model loaded
			fmt.Fprintln(stderr, "gollm generate: interrupted while loading the model")
			return 130
		}
		fmt.Fprintf(stderr, "gollm generate: %v%s\n", err, loadHint(err, o.kvBlocks))
		return 1
	}
	g := &generator{model: m, tok: m.Tokenizer(), engine: m.Engine(), loadTime: time.Since(start)}
	defer g.close()
	if spec != nil {
		vocab, err := m.Vocabulary()
		if err == nil {
			g.grammar, err = constraint.Compile(*spec, vocab, constraint.Options{})
		}
		if err != nil {
			fmt.Fprintf(stderr, "gollm generate: %v\n", err)
			return 1
		}
	}

	params := m.Sampling()
	applySamplingFlags(fs, &o, &params)
	maxTokens := o.maxTokens
	if maxTokens == 0 {
		maxTokens = m.MaxTokens()
	}
	base := engine.Request{MaxTokens: maxTokens, Sampling: params, Stop: o.stop, IgnoreEOS: o.ignoreEOS}

	if o.promptsFile != "" {
		return g.runBatch(ctx, o.promptsFile, batch, base, stdout, stderr)
	}
	req := base
	req.PromptIDs = promptIDs
	if textPrompt {
		req.PromptIDs = g.tok.Encode(o.prompt, true)
	}
	res := g.generate(ctx, req, func(text string) {
		if !o.jsonOut {
			io.WriteString(stdout, text)
		}
	})
	if res.err != nil {
		fmt.Fprintf(stderr, "gollm generate: %v\n", res.err)
		return 1
	}
	if o.jsonOut {
		if err := json.NewEncoder(stdout).Encode(res.json(g.loadTime)); err != nil {
			fmt.Fprintf(stderr, "gollm generate: %v\n", err)
			return 1
		}
	} else {
		fmt.Fprintln(stdout)
	}
	if res.reason == engine.FinishAbort {
		return 130 // interrupted
	}
	return 0
}

// applySamplingFlags overrides the model's sampling defaults with the flags the user gave.
func applySamplingFlags(fs *pflag.FlagSet, o *generateOptions, p *engine.SamplingParams) {
	for _, f := range []struct {
		name     string
		src, dst *float64
	}{
		{"temperature", &o.temperature, &p.Temperature}, {"top-p", &o.topP, &p.TopP}, {"min-p", &o.minP, &p.MinP},
		{"repetition-penalty", &o.repetitionPenalty, &p.RepetitionPenalty},
		{"presence-penalty", &o.presencePenalty, &p.PresencePenalty},
		{"frequency-penalty", &o.frequencyPenalty, &p.FrequencyPenalty},
	} {
		if fs.Changed(f.name) {
			*f.dst = *f.src
		}
	}
	if fs.Changed("top-k") {
		p.TopK = o.topK
	}
	if fs.Changed("seed") {
		seed := o.seed
		p.Seed = &seed
	}
}

// parseIDs parses "1,2,3" into token ids.
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("token id %q: %w", f, err)
		}
		if v < 0 {
			return nil, fmt.Errorf("token id %d is negative", v)
		}
		ids = append(ids, int32(v))
	}
	if len(ids) == 0 {
		return nil, errors.New("no token ids")
	}
	return ids, nil
}

// generator is a loaded model with its tokenizer and engine at hand.
type generator struct {
	model    *llm.Model
	tok      *tokenizer.Tokenizer
	engine   *engine.Engine
	loadTime time.Duration
	// grammar, when set, constrains every request's output (each its own matcher).
	grammar *constraint.Grammar
}

// close stops the engine (aborting what is left) and frees the model.
func (g *generator) close() { g.model.Close() }

// result is one finished generation with its timings.
type result struct {
	promptIDs []int32
	outputIDs []int32
	text      string
	reason    engine.FinishReason
	stop      string
	usage     engine.Usage
	err       error

	added, first, last time.Time
}

// generationJSON is what --json prints and each line of a --prompts-file run.
type generationJSON struct {
	Index        *int        `json:"index,omitempty"`
	PromptIDs    []int32     `json:"prompt_ids"`
	OutputIDs    []int32     `json:"output_ids"`
	Text         string      `json:"text"`
	FinishReason string      `json:"finish_reason"`
	StopString   string      `json:"stop_string,omitempty"`
	Usage        usageJSON   `json:"usage"`
	Timings      timingsJSON `json:"timings"`
	Error        string      `json:"error,omitempty"`
}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens"`
}

type timingsJSON struct {
	LoadSeconds  float64 `json:"load_s"`
	TTFTSeconds  float64 `json:"ttft_s"`
	TotalSeconds float64 `json:"total_s"`
	// PrefillTokensPerSecond is prompt tokens over the time to the first token (queueing included).
	PrefillTokensPerSecond float64 `json:"prefill_tok_s"`
	// DecodeTokensPerSecond is the tokens after the first over the time after the first; 0 when they all
	// arrived with the first (a reader that woke once the request was done).
	DecodeTokensPerSecond float64 `json:"decode_tok_s"`
}

func (r *result) json(load time.Duration) generationJSON {
	out := generationJSON{
		PromptIDs:    nonNil(r.promptIDs),
		OutputIDs:    nonNil(r.outputIDs),
		Text:         r.text,
		FinishReason: string(r.reason),
		StopString:   r.stop,
		Usage:        usageJSON{r.usage.PromptTokens, r.usage.CompletionTokens, r.usage.CachedTokens},
		Timings:      timingsJSON{LoadSeconds: load.Seconds()},
	}
	if r.err != nil {
		out.Error = r.err.Error()
	}
	if !r.first.IsZero() {
		ttft := r.first.Sub(r.added).Seconds()
		out.Timings.TTFTSeconds = ttft
		out.Timings.TotalSeconds = r.last.Sub(r.added).Seconds()
		if ttft > 0 {
			out.Timings.PrefillTokensPerSecond = float64(len(r.promptIDs)) / ttft
		}
		if d := r.last.Sub(r.first).Seconds(); d > 0 && len(r.outputIDs) > 1 {
			out.Timings.DecodeTokensPerSecond = float64(len(r.outputIDs)-1) / d
		}
	}
	return out
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// generate runs one request to its end, calling onText with each text delta.
func (g *generator) generate(ctx context.Context, req engine.Request, onText func(string)) *result {
	r := &result{promptIDs: req.PromptIDs, added: time.Now()}
	if g.grammar != nil {
		req.Constraint = g.grammar.NewMatcher()
	}
	s, err := g.engine.Add(ctx, req)
	if err != nil {
		r.err = err
		return r
	}
	for {
		out, err := s.Recv(context.Background()) // the request's ctx ends it; Recv then gets the abort
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		now := time.Now()
		if len(out.TokenIDs) > 0 {
			if r.first.IsZero() {
				r.first = now
			}
			r.last = now
		}
		r.outputIDs = append(r.outputIDs, out.TokenIDs...)
		r.text += out.Text
		if out.Text != "" && onText != nil {
			onText(out.Text)
		}
		if out.Finished() {
			r.reason, r.stop, r.usage = out.FinishReason, out.StopString, out.Usage
			if out.FinishReason == engine.FinishError {
				r.err = out.Err
			}
		}
	}
}

// promptLine is one line of a --prompts-file: a prompt and OpenAI-named sampling fields.
type promptLine struct {
	Prompt            *string     `json:"prompt"`
	PromptIDs         []int32     `json:"prompt_ids"`
	MaxTokens         *int        `json:"max_tokens"`
	Temperature       *float64    `json:"temperature"`
	TopP              *float64    `json:"top_p"`
	TopK              *int        `json:"top_k"`
	MinP              *float64    `json:"min_p"`
	Seed              *uint64     `json:"seed"`
	Stop              stopStrings `json:"stop"`
	PresencePenalty   *float64    `json:"presence_penalty"`
	FrequencyPenalty  *float64    `json:"frequency_penalty"`
	RepetitionPenalty *float64    `json:"repetition_penalty"`
	IgnoreEOS         *bool       `json:"ignore_eos"`
}

// stopStrings accepts "stop" as a string or an array of strings, as the OpenAI API does.
type stopStrings []string

func (s *stopStrings) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return errors.New("stop must be a string or an array of strings")
	}
	*s = many
	return nil
}

// request turns a line into an engine request over the command line's defaults.
func (l *promptLine) request(base engine.Request, tok *tokenizer.Tokenizer) (engine.Request, error) {
	req := base
	switch {
	case l.Prompt != nil && l.PromptIDs != nil:
		return req, errors.New("give prompt or prompt_ids, not both")
	case l.Prompt != nil:
		req.PromptIDs = tok.Encode(*l.Prompt, true)
	case l.PromptIDs != nil:
		req.PromptIDs = l.PromptIDs
	default:
		return req, errors.New("no prompt or prompt_ids")
	}
	if l.MaxTokens != nil {
		req.MaxTokens = *l.MaxTokens
		if req.MaxTokens <= 0 {
			return req, fmt.Errorf("max_tokens %d must be positive", req.MaxTokens)
		}
	}
	p := &req.Sampling
	for _, f := range []struct {
		src *float64
		dst *float64
	}{
		{l.Temperature, &p.Temperature}, {l.TopP, &p.TopP}, {l.MinP, &p.MinP},
		{l.PresencePenalty, &p.PresencePenalty}, {l.FrequencyPenalty, &p.FrequencyPenalty},
		{l.RepetitionPenalty, &p.RepetitionPenalty},
	} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	if l.TopK != nil {
		p.TopK = *l.TopK
	}
	if l.Seed != nil {
		seed := *l.Seed
		p.Seed = &seed
	}
	if l.Stop != nil {
		req.Stop = l.Stop
	}
	if l.IgnoreEOS != nil {
		req.IgnoreEOS = *l.IgnoreEOS
	}
	return req, nil
}

// runBatch runs every line of a JSONL file (path, read into data) through the engine at once and writes one JSON line per
// input line, in input order, each as soon as it and all lines before it are done.
func (g *generator) runBatch(ctx context.Context, path string, data []byte, base engine.Request, stdout, stderr io.Writer) int {
	var reqs []engine.Request
	var errs []error
	var lineNos []int
	lineNo := 0
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		lineNo++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l promptLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		err := dec.Decode(&l)
		if err == nil && len(bytes.TrimSpace(line[dec.InputOffset():])) > 0 {
			err = errors.New("text after the JSON object (one request per line)")
		}
		var req engine.Request
		if err == nil {
			req, err = l.request(base, g.tok)
		}
		if err != nil {
			err = fmt.Errorf("%s:%d: %w", path, lineNo, err)
		}
		reqs = append(reqs, req)
		errs = append(errs, err)
		lineNos = append(lineNos, lineNo)
	}

	// A failed write (a closed pipe) ends the run: the rest is aborted, not generated for nobody.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	code := 0
	var writeErr error
	inOrder(len(reqs), max(runtime.GOMAXPROCS(0), 1)*64, func(i int) *result {
		if errs[i] != nil {
			return &result{err: errs[i]}
		}
		r := g.generate(runCtx, reqs[i], nil)
		if r.err != nil {
			r.err = fmt.Errorf("%s:%d: %w", path, lineNos[i], r.err)
		}
		return r
	}, func(i int, r *result) {
		line := r.json(g.loadTime)
		line.Index = &i
		if r.err != nil {
			code = 1
			fmt.Fprintf(stderr, "gollm generate: request %d: %v\n", i, r.err)
		}
		if writeErr == nil {
			if writeErr = enc.Encode(line); writeErr == nil {
				writeErr = w.Flush()
			}
			if writeErr != nil {
				cancel()
			}
		}
	})
	if writeErr != nil {
		fmt.Fprintf(stderr, "gollm generate: %v\n", writeErr)
		return 1
	}
	if ctx.Err() != nil {
		code = 130 // interrupted: requests that did not get in fail with ctx's error, and that is why
	}
	return code
}

// inOrder calls run(i) for every i in [0, n), at most parallel at once, and emit(i, result) in index
// order, each as soon as its result and all before it are there.
func inOrder(n, parallel int, run func(i int) *result, emit func(i int, r *result)) {
	results := make([]*result, n)
	done := make([]chan struct{}, n)
	for i := range done {
		done[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	// Submit from a goroutine of its own: waiting for a free slot must not hold up the emits.
	wg.Go(func() {
		sem := make(chan struct{}, parallel)
		for i := range n {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				defer close(done[i])
				results[i] = run(i)
			})
		}
	})
	for i := range n {
		<-done[i]
		emit(i, results[i])
	}
	wg.Wait()
}
