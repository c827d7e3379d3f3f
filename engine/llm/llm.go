package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/chattemplate"
	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/hub"
	"github.com/gollm/gollm/weights/tokenizer"
)

// Sentinel errors; test them with errors.Is.
var (
	// ErrDoesNotFit is wrapped by Load's error when the model and a KV cache for one request of
	// Config.MaxModelLen tokens do not fit in the memory there is, or in the KV pages Config.KVBlocks
	// gives, and when the KV pages Config.KVBlocks asks for do not fit in the memory left by the
	// weights (the error then wraps model.ErrKVTooLarge too). When MaxModelLen is 0, only the CPU's
	// cache sized from memory must hold the model's context (up to 8192 tokens); otherwise requests
	// are capped to what the KV cache holds (see MaxModelLen). The error's text says what to change.
	ErrDoesNotFit = errors.New("llm: the model does not fit")
	// ErrNoChatTemplate is returned by Chat and ChatStream for a model without a usable chat template.
	ErrNoChatTemplate = errors.New("llm: the model has no chat template")
)

// DefaultMaxTokens is the output cap of a request that sets none (MaxTokens) when the model's
// generation_config.json gives no max_new_tokens.
const DefaultMaxTokens = 256

// Config says how Load loads a model and runs its engine. The zero value loads on the GPU when there
// is one (and this binary was built with -tags cuda), else on the CPU, with a KV cache sized from
// memory and the engine's defaults.
type Config struct {
	// Device is where the model runs: "cpu", "cuda", or "auto" or "" for the GPU when one can be
	// used, else the CPU.
	Device string
	// DType is the GPU's compute dtype ("float32", "bfloat16", "float16"); "" keeps the checkpoint's.
	// The CPU computes in float32.
	DType string
	// KVBlocks is the number of KV cache pages. 0 sizes the cache from memory: on the CPU a quarter of
	// the host memory left once the weights are loaded, no more than MaxNumSeqs full contexts and at
	// least one; on a GPU what MemoryUtilization of its memory leaves after the weights and the step's
	// workspace.
	KVBlocks int
	// PageSize is the number of tokens per KV page; 0 means model.DefaultBlockSize.
	PageSize int
	// MaxModelLen caps the tokens (prompt plus output) of one request; 0 means the model's
	// max_position_embeddings, or what the KV cache holds when that is less.
	MaxModelLen int
	// MaxNumSeqs caps the sequences running at once; 0 means engine.DefaultMaxNumSeqs.
	MaxNumSeqs int
	// MaxBatchedTokens caps the tokens of one engine step; 0 means engine.DefaultMaxNumBatchedTokens.
	MaxBatchedTokens int
	// LongPrefillTokenThreshold caps one prompt's prefill chunk in a step; 0 means no cap (see
	// engine.Config.LongPrefillTokenThreshold).
	LongPrefillTokenThreshold int
	// MemoryUtilization is the share of the GPU's memory the model may fill when KVBlocks is 0; 0
	// means model.DefaultMemoryUtilization.
	MemoryUtilization float64
	// DisablePrefixCache turns off the reuse of the KV of shared prompt prefixes.
	DisablePrefixCache bool
	// DisablePipelining queues each decode step only after the previous step's tokens are read.
	DisablePipelining bool
	// Logger receives the loader's and the engine's logs; nil means slog.Default().
	Logger *slog.Logger
	// Progress, when not nil, is called as the weights load with the bytes loaded so far and their
	// total (see model.Options.Progress), to show a bar, a rate and the time left.
	Progress func(loaded, total int64)
	// SkipWeightCheck loads the weights without scanning them for NaN and infinities (see
	// model.Options.SkipWeightCheck): for huge checkpoints already known to be sound.
	SkipWeightCheck bool
	// Quantization "fp8" runs the Linear layers as FP8 products, quantizing a float checkpoint at load
	// (see model.Options.Quantization); "" runs the checkpoint as it is (an FP8 checkpoint as FP8).
	Quantization string
	// KVCacheDType is the KV pages' element type: "" or "auto" the device's, "fp8" e4m3 with the
	// checkpoint's per-layer scales (see model.Options.KVCacheDType).
	KVCacheDType string
	// SharedPrefix is model.Options.SharedPrefix: "" or "auto" the dispatcher reads pages that decodes
	// share once where it pays, "off" never, "always" wherever it can (for benchmarks comparing the
	// paths).
	SharedPrefix string
	// TensorParallel is model.Options.TensorParallel: the ranks the model is sharded over (0 or 1:
	// whole), one GPU each with NCCL on the GPU, goroutines on the CPU.
	TensorParallel int
}

// check refuses values out of range before anything loads.
func (c *Config) check() error {
	for _, f := range []struct {
		name  string
		value int
	}{{"KVBlocks", c.KVBlocks}, {"PageSize", c.PageSize}, {"MaxModelLen", c.MaxModelLen}, {"MaxNumSeqs", c.MaxNumSeqs},
		{"MaxBatchedTokens", c.MaxBatchedTokens}, {"LongPrefillTokenThreshold", c.LongPrefillTokenThreshold},
		{"TensorParallel", c.TensorParallel}} {
		if f.value < 0 {
			return fmt.Errorf("llm: config: %s %d must not be negative", f.name, f.value)
		}
	}
	if !(c.MemoryUtilization >= 0 && c.MemoryUtilization <= 1) {
		return fmt.Errorf("llm: config: MemoryUtilization %v must lie in [0, 1]", c.MemoryUtilization)
	}
	if c.KVBlocks > 0 && c.MaxModelLen > 0 && c.KVBlocks*c.PageSize < c.MaxModelLen {
		return fmt.Errorf("llm: MaxModelLen %d does not fit a KV cache of %d pages of %d tokens; give more KV pages or a smaller MaxModelLen: %w",
			c.MaxModelLen, c.KVBlocks, c.PageSize, ErrDoesNotFit)
	}
	return nil
}

// Resolve returns the model folder that name stands for: the built-in model's (written to the user's
// cache directory on first use) when name is empty; else name itself when it is a folder; else, for a
// Hugging Face name ORG/NAME[@REVISION], its snapshot in the Hugging Face cache (hub.Resolve, which
// says how to fetch a model it does not find). Load, LoadTokenizer and the gollm command resolve every
// model name through it. A missing folder gives an error wrapping fs.ErrNotExist, a Hugging Face name
// not in the cache one wrapping hub.ErrNotCached.
func Resolve(name string) (dir string, err error) {
	if name == "" {
		dir, err := defaultmodel.Dir()
		if err != nil {
			return "", fmt.Errorf("llm: the built-in model: %w", err)
		}
		return dir, nil
	}
	dir, err = hub.Resolve(name)
	if err != nil {
		return "", fmt.Errorf("llm: %w", err)
	}
	return dir, nil
}

// displayName is the name a model is known by in logs and the OpenAI API: the built-in model's name,
// ORG/NAME (without the revision) for a model given by its Hugging Face name, or the base name of its
// folder.
func displayName(name string) string {
	if name == "" {
		return defaultmodel.Name()
	}
	if _, err := os.Stat(name); err != nil {
		if n, err := hub.ParseName(name); err == nil {
			return n.Repo
		}
	}
	if abs, err := filepath.Abs(name); err == nil { // "." or "..": the folder's own name
		name = abs
	}
	return filepath.Base(filepath.Clean(name))
}

// LoadTokenizer loads the tokenizer of the model name stands for (see Resolve), without its weights.
func LoadTokenizer(name string) (*tokenizer.Tokenizer, error) {
	dir, err := Resolve(name)
	if err != nil {
		return nil, err
	}
	return tokenizer.Load(filepath.Join(dir, weights.TokenizerFile))
}

// Model is a loaded model with its tokenizer, chat template and running engine. Its methods are safe
// for concurrent use.
type Model struct {
	name     string
	device   string
	folder   *weights.Folder
	model    *model.Model
	tok      *tokenizer.Tokenizer
	engine   *engine.Engine
	template *chattemplate.Template
	// templateErr says why template is nil.
	templateErr error
	sampling    engine.SamplingParams
	maxTokens   int
	maxNumSeqs  int

	vocabOnce sync.Once
	vocab     *constraint.Vocabulary
	vocabErr  error

	// closeOnce releases the model once, however many goroutines call Close; closeErr is its error.
	closeOnce sync.Once
	closeErr  error
}

// Load loads the model name stands for (see Resolve: "" is the built-in model) as cfg says and starts
// its engine; Close releases the model. Ending ctx ends Load at once with an error wrapping ctx's, even
// where the load itself cannot be interrupted (a read of a slow disk, an upload to the GPU): the
// loading goes on in a goroutine of its own, stops at the next tensor, and frees what it built.
func Load(ctx context.Context, name string, cfg Config) (*Model, error) {
	type loaded struct {
		m   *Model
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		beforeLoad()
		m, err := loadModel(ctx, name, cfg)
		done <- loaded{m, err}
	}()
	select {
	case r := <-done:
		return r.m, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.m != nil {
				r.m.Close()
			}
		}()
		// context.Canceled or DeadlineExceeded, and the cause given, where one was
		return nil, fmt.Errorf("llm: loading %s: %w", displayName(name), contextError(ctx))
	}
}

// beforeLoad runs in Load's loading goroutine before anything is read (tests block loading with it).
var beforeLoad = func() {}

// loadModel is Load's work, done in its goroutine.
func loadModel(ctx context.Context, name string, cfg Config) (*Model, error) {
	if cfg.PageSize == 0 {
		cfg.PageSize = model.DefaultBlockSize
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = engine.DefaultMaxNumSeqs
	}
	if cfg.MaxBatchedTokens == 0 {
		cfg.MaxBatchedTokens = engine.DefaultMaxNumBatchedTokens
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	dir, err := Resolve(name)
	if err != nil {
		return nil, err
	}
	device, notice, err := model.ResolveDevice(cfg.Device)
	if err != nil {
		return nil, err
	}
	if notice != "" {
		log.Info(notice)
	}
	folder, err := weights.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := load(ctx, folder, device, cfg, log)
	if err != nil {
		folder.Close()
		return nil, err
	}
	m.name = displayName(name)
	quantization := cfg.Quantization
	if q := folder.Config.Quantization; q != nil {
		quantization = "fp8 (" + q.Method + " checkpoint)"
	}
	kvDType := m.model.Shape().KVCacheDType
	if kvDType == "" {
		kvDType = model.KVCacheAuto
	}
	log.Info("model loaded", "model", m.name, "dir", dir, "device", device, "kv_blocks", m.model.NumBlocks(),
		"page_size", cfg.PageSize, "max_model_len", m.engine.MaxModelLen(), "quantization", quantization,
		"kv_cache_dtype", kvDType, "seconds", time.Since(start).Seconds())
	return m, nil
}

// load loads the opened folder's tokenizer and weights and starts the engine; on an error it has
// released all but the folder.
func load(ctx context.Context, folder *weights.Folder, device string, cfg Config, log *slog.Logger) (*Model, error) {
	mc := folder.Config
	if cfg.MaxModelLen > mc.MaxPositionEmbeddings {
		return nil, fmt.Errorf("llm: MaxModelLen %d is longer than the model's context (max_position_embeddings %d)",
			cfg.MaxModelLen, mc.MaxPositionEmbeddings)
	}
	tok, err := tokenizer.Load(folder.TokenizerPath())
	if err != nil {
		return nil, err
	}
	numBlocks := cfg.KVBlocks
	if numBlocks == 0 && device == model.DeviceCPU {
		if numBlocks, err = cpuKVBlocks(mc, cfg.PageSize, cfg.MaxNumSeqs, cfg.MaxModelLen, availableMemory(), cfg.Quantization, cfg.KVCacheDType); err != nil {
			return nil, err
		}
		// Ranks with fewer KV heads than their count each hold a copy of a KV head: the pages cost
		// that many times more.
		if copies := cfg.TensorParallel / max(1, mc.NumKeyValueHeads); copies > 1 {
			numBlocks = max(1, numBlocks/copies)
		}
	} // on a GPU, 0 sizes the pool from the device's free memory
	// A step's logits rows: one per running sequence, and the prompt rows of prompt-logprobs requests.
	logitRows := cfg.MaxNumSeqs + min(engine.DefaultMaxPromptLogitRows, cfg.MaxBatchedTokens)
	mod, err := model.LoadContext(ctx, folder, model.Options{Device: device, DType: cfg.DType, NumBlocks: numBlocks,
		BlockSize: cfg.PageSize, MemoryUtilization: cfg.MemoryUtilization, Progress: cfg.Progress,
		MaxStepTokens: cfg.MaxBatchedTokens, MaxLogitRows: logitRows, SkipWeightCheck: cfg.SkipWeightCheck,
		Quantization: cfg.Quantization, KVCacheDType: cfg.KVCacheDType, SharedPrefix: cfg.SharedPrefix, Logger: log,
		TensorParallel: cfg.TensorParallel})
	if err != nil {
		if errors.Is(err, model.ErrKVTooLarge) {
			if cfg.KVBlocks > 0 {
				err = fmt.Errorf("llm: KVBlocks %d: %w: %w (give fewer, or 0 to size the cache from memory)", cfg.KVBlocks, ErrDoesNotFit, err)
			} else {
				err = fmt.Errorf("llm: %w: %w", ErrDoesNotFit, err)
			}
		}
		return nil, err
	}
	eng, err := engine.New(mod, tok, engine.Config{
		MaxNumSeqs:           cfg.MaxNumSeqs,
		MaxNumBatchedTokens:  cfg.MaxBatchedTokens,
		DisablePrefixCaching: cfg.DisablePrefixCache,

		LongPrefillTokenThreshold: cfg.LongPrefillTokenThreshold,
		DisablePipelining:         cfg.DisablePipelining,
		MaxModelLen:               cfg.MaxModelLen,
		EOSTokenIDs:               folder.Generation.EOSTokenIDs,
		Logger:                    log,
	})
	if err != nil {
		mod.Close()
		return nil, err
	}
	m := &Model{device: device, folder: folder, model: mod, tok: tok, engine: eng,
		sampling: engine.DefaultSampling(folder.Generation), maxTokens: DefaultMaxTokens, maxNumSeqs: cfg.MaxNumSeqs}
	if mt := folder.Generation.MaxNewTokens; mt != nil && *mt > 0 {
		m.maxTokens = *mt
	}
	if held := eng.MaxModelLen(); cfg.MaxModelLen > 0 && held < cfg.MaxModelLen {
		m.stop()
		return nil, fmt.Errorf("llm: MaxModelLen %d does not fit the KV cache (%d pages of %d tokens); give more KV pages or a smaller MaxModelLen: %w",
			cfg.MaxModelLen, mod.NumBlocks(), cfg.PageSize, ErrDoesNotFit)
	} else if cfg.MaxModelLen == 0 && held < mc.MaxPositionEmbeddings {
		log.Warn("the KV cache holds less than the model's context: requests are limited to max_model_len (set the KV pages or max_model_len to choose)",
			"max_model_len", held, "max_position_embeddings", mc.MaxPositionEmbeddings, "kv_blocks", mod.NumBlocks())
	}
	m.template, err = chattemplate.Parse(folder.TokenizerConfig.ChatTemplate)
	switch {
	case errors.Is(err, chattemplate.ErrNoTemplate):
		m.templateErr = ErrNoChatTemplate
	case err != nil:
		log.Warn("cannot parse the model's chat template: chats will fail", "error", err)
		m.templateErr = fmt.Errorf("%w: it does not parse: %v", ErrNoChatTemplate, err)
	}
	return m, nil
}

// stop closes the engine (aborting what still runs) and the model, not the folder.
func (m *Model) stop() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := m.engine.Close(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil // requests still running were aborted, as Close says
	}
	return errors.Join(err, m.model.Close())
}

// Close stops the engine, aborting the requests still running (they finish with
// engine.FinishAbort, and Generate, Stream, Chat and ChatStream with an error wrapping
// engine.ErrClosed, as do those called afterwards), and releases the model's memory. Stop serving
// requests first (shut the HTTP server down) to let them finish. Close may be called more than once,
// from any goroutine: every call returns once the model is released, with the first call's error.
func (m *Model) Close() error {
	m.closeOnce.Do(func() { m.closeErr = errors.Join(m.stop(), m.folder.Close()) })
	return m.closeErr
}

// Name returns the model's name: the built-in model's, ORG/NAME (without the revision) for a model
// loaded by its Hugging Face name, or the base name of its folder. The OpenAI API serves the model
// under it unless openai.Config.ModelName says otherwise.
func (m *Model) Name() string { return m.name }

// Dir returns the model's folder.
func (m *Model) Dir() string { return m.folder.Dir }

// Device returns where the model runs: model.DeviceCPU or model.DeviceCUDA.
func (m *Model) Device() string { return m.device }

// MaxModelLen returns the most tokens (prompt plus output) one request can hold.
func (m *Model) MaxModelLen() int { return m.engine.MaxModelLen() }

// KVBlocks returns the number of pages of the KV cache.
func (m *Model) KVBlocks() int { return m.model.NumBlocks() }

// Sampling returns the model's sampling defaults (its generation_config.json's, as vLLM applies
// them), which requests start from.
func (m *Model) Sampling() engine.SamplingParams { return m.sampling }

// MaxTokens returns the output cap of requests that set none: generation_config.json's
// max_new_tokens, else DefaultMaxTokens.
func (m *Model) MaxTokens() int { return m.maxTokens }

// Engine returns the running engine, for requests in tokens (engine.Request) and its statistics.
func (m *Model) Engine() *engine.Engine { return m.engine }

// Tokenizer returns the model's tokenizer.
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// Folder returns the opened model folder: its config, generation config and tokenizer config.
func (m *Model) Folder() *weights.Folder { return m.folder }

// Vocabulary returns the model's vocabulary as constrained decoding reads it (package
// engine/constraint: the tokenizer's token bytes over the model's vocab_size), built and warmed on
// first use (a fraction of a second at a 128k vocabulary) and shared by every constraint compiled for
// the model.
func (m *Model) Vocabulary() (*constraint.Vocabulary, error) {
	m.vocabOnce.Do(func() {
		m.vocab, m.vocabErr = constraint.NewVocabulary(m.tok, m.folder.Config.VocabSize)
		if m.vocabErr == nil {
			m.vocab.Warm()
		}
	})
	return m.vocab, m.vocabErr
}

// ChatTemplate returns the model's parsed chat template, or nil with an error wrapping
// ErrNoChatTemplate.
func (m *Model) ChatTemplate() (*chattemplate.Template, error) {
	if m.template == nil {
		return nil, m.templateErr
	}
	return m.template, nil
}
