package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/gollm/gollm/kvcache"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/scheduler"
	"github.com/gollm/gollm/weights"
)

// Sentinel errors; test them with errors.Is.
var (
	// ErrClosed is returned by Add once Close has been called.
	ErrClosed = errors.New("engine: closed")
	// ErrPromptTooLong is returned by Add when the prompt leaves no room for one generated token in
	// the context (the model's max_position_embeddings, Config.MaxModelLen or the KV pool's size).
	ErrPromptTooLong = errors.New("engine: prompt too long")
	// ErrInvalidRequest is returned by Add for a request it cannot run (empty prompt, token ids
	// outside the vocabulary, sampling parameters out of range).
	ErrInvalidRequest = errors.New("engine: invalid request")
	// ErrNonFiniteLogits is wrapped by the Err of a request that finished with FinishError because
	// the model's logits for it held NaN or +Inf (broken weights, or numbers that overflowed): no
	// token can be drawn from them. The step's other requests go on.
	ErrNonFiniteLogits = errors.New("the model's logits are not finite (NaN or infinite)")
	// ErrFailed is wrapped by Err, by Add's errors and by the Err of every request in flight once the
	// engine has stopped for good because its model can run nothing any more (model.ErrDeviceLost: the
	// GPU's context was lost). The process should exit; a new one gets a new device context.
	ErrFailed = errors.New("engine: failed")
)

// Model is what the engine needs from a loaded model. *model.Model satisfies it. Forward is called
// from the engine's step goroutine only.
type Model interface {
	// Forward runs one step and returns one row of logits per entry of s.LogitRows.
	Forward(s *model.Step) ([][]float32, error)
	// Config is the model's configuration (vocabulary size, context length, EOS ids).
	Config() *weights.Config
	// BlockSize is the number of tokens per KV page.
	BlockSize() int
	// NumBlocks is the number of KV pages the model allocated.
	NumBlocks() int
}

// PickModel is a Model that can end a step with a pick per entry of s.LogitRows on its own device and
// return only the token ids: the greedy argmax (the lowest index among equal maxima, like the engine's
// own) when params is nil, else a draw under each row's model.SampleParams (temperature, min-p, top-k
// and top-p, as the engine's sampler filters), so that no logits cross to the host (33 MB a step at
// batch 64 of a 128k vocabulary). Start may return before the step has ended (model.Pick.Wait gives the
// ids), and a step queued then may take its input tokens from those picks where they are
// (model.Step.InputFrom): the engine queues decode step N+1 while step N runs and reads N's tokens
// after, so the host's work between steps overlaps the device's (pipelined decode).
//
// The engine uses it for a step in which no sequence that needs a token has penalties or a logit bias
// or asks for logprobs. Device draws take their uniform from a counter-based hash of the request's seed and output
// index (model.SampleParams), and a penalty-free request sampled on the host (a step with logprobs or a
// penalised neighbour) draws the same way (model.SampleLogits, the kernel's CPU twin): a seeded request
// without penalties gives the same tokens whatever shares its batch and whichever path its steps take,
// up to float rounding. Requests with penalties keep the host sampler's own PCG stream. *model.Model
// satisfies it.
type PickModel interface {
	Start(s *model.Step, params []model.SampleParams) (*model.Pick, error)
}

// asyncPicker is implemented by models that say whether their Start returns before the step has run
// (*model.Model: PicksAsync, true on the GPU). The engine pipelines steps only where it does: where
// Start runs the step itself (the CPU backend), a step queued before the previous one's tokens are read
// would run before they are delivered, and every token would reach its stream a step late. A PickModel
// without the method is taken to pick on its device.
type asyncPicker interface {
	PicksAsync() bool
}

// pipelines reports whether steps on m may be pipelined (asyncPicker).
func pipelines(m Model) bool {
	a, ok := m.(asyncPicker)
	return !ok || a.PicksAsync()
}

// MaskModel is a PickModel whose pick can wait for its masks (structured output): Begin queues a step
// without its pick and returns at once, and the Pick's Commit queues the pick under one
// model.SampleParams per logits row, each with the mask of its row's constraint (SampleParams.Mask).
// The engine begins a step with constrained rows, computes their masks while the model runs it, and
// commits them: for a pipelined step, queued before the previous step's tokens are read, the masks
// (which depend on those tokens) are computed once they are, while the step's forward runs. A
// PickModel without Begin draws its constrained requests' tokens on the host. *model.Model
// satisfies it.
type MaskModel interface {
	PickModel
	Begin(s *model.Step) (*model.Pick, error)
}

// Constraint restricts what one request may generate (structured output: a JSON Schema, a regular
// expression, a grammar), token by token. *constraint.Matcher (package engine/constraint)
// satisfies it. A constraint belongs to one request; the engine never calls it concurrently, but
// it may call Mask from another goroutine than Accept (the mask of a step is computed while the
// model runs that step).
type Constraint interface {
	// Mask sets dst, one bit per token id (bit id%64 of dst[id/64]), to the tokens allowed next.
	// Special tokens are never set but where the constraint writes them (a special-token terminal:
	// constraint.Spec.SpecialTokens): the engine adds the request's EOS and stop token ids when
	// Complete.
	Mask(dst []uint64)
	// Accept advances over the token drawn; an error means the constraint does not allow it.
	Accept(token int32) error
	// Complete reports whether the output so far is a whole string of the constraint.
	Complete() bool
	// Done reports whether the output is complete and nothing may follow it: the request then
	// ends (FinishStop) without waiting for an EOS token.
	Done() bool
	// Rollback undoes the last n accepted tokens (for a step that speculated a token).
	Rollback(n int)
}

// Default limits used when Config leaves them zero.
const (
	DefaultMaxNumSeqs          = 64
	DefaultMaxNumBatchedTokens = 2048
	// DefaultMaxPromptLogitRows bounds the prompt positions of prompt-logprobs requests in one step:
	// each is a row of logits brought to the host (128 MB a step at a 128k vocabulary).
	DefaultMaxPromptLogitRows = 256
)

// Config tunes an Engine. The zero value is usable.
type Config struct {
	// MaxNumSeqs caps the sequences running at once; 0 means DefaultMaxNumSeqs.
	MaxNumSeqs int
	// MaxNumBatchedTokens caps the tokens of one step (decodes plus prefill chunks); 0 means
	// DefaultMaxNumBatchedTokens. It is raised to MaxNumSeqs if below it.
	MaxNumBatchedTokens int
	// MaxPromptLogitRows caps the prompt tokens of Request.PromptLogprobs requests in one step (their
	// logits come to the host); 0 means DefaultMaxPromptLogitRows.
	MaxPromptLogitRows int
	// LongPrefillTokenThreshold caps one prompt's prefill chunk in a step below MaxNumBatchedTokens
	// (scheduler.Config.LongPrefillTokenThreshold): short prompts behind a long one start sooner, the
	// long one takes more steps. 0 means no cap.
	LongPrefillTokenThreshold int
	// DisablePrefixCaching turns off the reuse of cached prompt prefixes.
	DisablePrefixCaching bool
	// DisablePipelining makes every step wait for the previous one's tokens before it is queued (see
	// PickModel), as a model without Start would, or whose picks are not asynchronous (asyncPicker).
	DisablePipelining bool
	// pipelineHostPicks pipelines steps on a model whose picks are not asynchronous too: the package's
	// tests run the pipelined loop on the CPU model with it.
	pipelineHostPicks bool
	// MaxModelLen caps prompt plus output tokens; 0 means the model's max_position_embeddings. The
	// KV pool's capacity (NumBlocks × BlockSize) caps it too.
	MaxModelLen int
	// EOSTokenIDs are end-of-sequence ids in addition to the model config's, typically those of
	// generation_config.json.
	EOSTokenIDs []int32
	// Logger receives the engine's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Request is one generation request. Prompt and limits are in tokens; the server translates OpenAI
// requests into it (n > 1 is several requests).
type Request struct {
	// ID names the request in logs and Stream.ID; empty means the engine makes one up.
	ID string
	// PromptIDs is the tokenized prompt, special tokens (BOS) included; not empty.
	PromptIDs []int32
	// MaxTokens caps the generated tokens; 0 means as many as the context allows.
	MaxTokens int
	// MinTokens is the number of tokens generated before EOS, stop ids and stop strings apply: as
	// vLLM's min_tokens, the first MinTokens tokens are never EOS (even with IgnoreEOS) or a stop
	// id (their logits are masked, so those draws happen on the host), and a stop string ending in
	// their text does not stop the request.
	MinTokens int
	// Sampling says how tokens are chosen.
	Sampling SamplingParams
	// Stop strings end the request when they appear in the output text; the text returned stops
	// before the match, or after it with IncludeStopString.
	Stop []string
	// IncludeStopString keeps a matched stop string at the end of the returned text (vLLM's
	// include_stop_str_in_output); the text after it is still cut.
	IncludeStopString bool
	// StopTokenIDs end the request when generated, like EOS.
	StopTokenIDs []int32
	// IgnoreEOS keeps generating past EOS tokens (stop token ids still apply).
	IgnoreEOS bool
	// Logprobs asks for each generated token's log-probability, and TopLogprobs for that many most
	// likely alternatives at each position.
	Logprobs    bool
	TopLogprobs int
	// PromptLogprobs asks for the log-probability of every prompt token given the tokens before it,
	// with PromptTopLogprobs alternatives each (vLLM's prompt_logprobs; what the completions API's
	// echo with logprobs returns), in the request's first Output. Every prompt position's logits are
	// then needed: the request takes no prefix-cache hits (its blocks still join the cache), and its
	// prompt runs with its logits on the host, in chunks within Config.MaxPromptLogitRows.
	PromptLogprobs    bool
	PromptTopLogprobs int
	// KeepSpecialTokens puts the text of special tokens into Output.Text (they are skipped by
	// default, as in vLLM's skip_special_tokens).
	KeepSpecialTokens bool
	// Constraint, when set, restricts the output (structured output): every draw is masked to the
	// tokens it allows, plus EOS and the stop token ids once it is Complete, and the request ends
	// when it is Done. Logprobs stay those of the raw logits (vLLM's default). Such a request draws
	// on the model's device where the model takes masks (MaskModel), else on the host. It must be
	// fresh (no token accepted) and serve this request alone.
	Constraint Constraint
}

// Stats is a snapshot of the engine's state and counters, for metrics.
type Stats struct {
	Running, Waiting int // sequences
	// KV pool occupancy, in blocks.
	KVBlocksTotal, KVBlocksUsed, KVBlocksCached int
	// KVUsage is KVBlocksUsed / KVBlocksTotal.
	KVUsage float64
	// PrefixQueriedTokens and PrefixHitTokens count prompt tokens looked up in the prefix cache
	// and found there; PrefixHitRate is their ratio.
	PrefixQueriedTokens, PrefixHitTokens int64
	PrefixHitRate                        float64
	// Preemptions counts sequences preempted (their KV freed, to be recomputed) since the start.
	Preemptions int
	// Steps, PromptTokens (prefill tokens computed, recomputation included) and GenerationTokens
	// (tokens sampled) since the start.
	Steps, PromptTokens, GenerationTokens int64
	// PipelinedSteps counts the steps queued before the previous step's tokens were read (pipelined
	// decode; see PickModel).
	PipelinedSteps int64
	// NonFiniteLogits counts the requests ended because their logits held NaN or +Inf
	// (ErrNonFiniteLogits).
	NonFiniteLogits int64
	// Finished counts finished requests by reason.
	Finished map[FinishReason]int64
}

// Engine runs a model over a continuously batched stream of requests. Add and Close are safe for
// concurrent use; everything else (the scheduler, the KV pool, each request's sampler) belongs to
// one goroutine that runs the step loop.
type Engine struct {
	model     Model
	tok       Tokenizer
	log       *slog.Logger
	vocab     int
	maxLen    int
	eos       []int32
	sched     *scheduler.Scheduler
	pool      *kvcache.Pool
	workers   int
	pipeline  bool // Config.DisablePipelining unset
	masks     bool // the model is a MaskModel: constrained requests pick on its device
	addCh     chan *request
	closing   chan struct{} // closed by Close: finish in-flight work, accept no more
	abortAll  chan struct{} // closed by Close when its context ends: abort in-flight work
	done      chan struct{} // closed when the loop has exited
	abortOnce sync.Once

	mu     sync.RWMutex // guards closed against sends on addCh
	closed bool

	// failed is closed, and failErr set, once the model has failed for good (fail).
	failMu  sync.Mutex
	failErr error
	failed  chan struct{}

	statsMu sync.Mutex
	stats   Stats

	// cancelled holds requests whose Add context has ended, queued by context.AfterFunc for the
	// loop to abort: a step costs what was cancelled, not a check of every live request.
	cancelMu  sync.Mutex
	cancelled []*request

	// Owned by the loop.
	live   map[kvcache.SeqID]*request
	nextID kvcache.SeqID
	steps  [2]model.Step // alternate: a step may be in flight while the next is built
	flip   int
	ahead  *inflight  // the step queued on the model whose picks the loop has not read yet
	outbox []delivery // outputs of the loop's current turn, pushed by deliver
}

// request is the loop's state for one request.
type request struct {
	req    Request
	id     kvcache.SeqID
	stream *Stream
	// unwatch stops watching the Add context (see Engine.cancelled); dropped, guarded by
	// Engine.cancelMu, says Add failed and the request never reached the loop.
	unwatch func() bool
	dropped bool

	limits   scheduler.Limits
	seq      *scheduler.Sequence // set when the loop admits the request
	sampler  *sampler
	seed     uint64 // the request's seed (Sampling.Seed or a random one): device draws hash it
	detok    *detokenizer
	stops    stopMatcher
	stopIDs  []int32 // EOS (unless ignored) and stop token ids: their text is never shown
	held     string  // output text not streamed yet (it could begin a stop string)
	logprobs Logprobs
	// prompt collects the prompt logprobs (Request.PromptLogprobs) as its prompt's steps run, entry i
	// for prompt token i, until they go out with the first token (promptRows says which steps: those
	// before it, as the scheduler tracks); nil without them and after that.
	prompt []Logprobs
	// minMasked are the ids the first MinTokens draws may not pick: EOS whether or not it is
	// ignored, and the stop token ids (vLLM's all_stop_token_ids); nil without MinTokens.
	minMasked []int32
	// mask is the constraint's mask for the draw under way (Request.Constraint), one bit per token;
	// hostMask says the draws happen on the host (the model is no MaskModel).
	mask     []uint64
	hostMask bool
}

// New returns an engine over m, decoding text with tok, and starts its step loop. The KV pool has
// m.NumBlocks() blocks of m.BlockSize() tokens. Call Close to stop it; the caller still owns m.
func New(m Model, tok Tokenizer, cfg Config) (*Engine, error) {
	if m == nil || tok == nil {
		return nil, errors.New("engine: nil model or tokenizer")
	}
	mc := m.Config()
	if cfg.MaxNumSeqs <= 0 {
		cfg.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if cfg.MaxNumBatchedTokens <= 0 {
		cfg.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	cfg.MaxNumBatchedTokens = max(cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs)
	if cfg.MaxPromptLogitRows <= 0 {
		cfg.MaxPromptLogitRows = DefaultMaxPromptLogitRows
	}
	var groups []kvcache.Group
	for _, w := range model.KVLayoutOf(mc).Windows {
		groups = append(groups, kvcache.Group{Window: w})
	}
	pool, err := kvcache.NewPool(kvcache.Config{
		NumBlocks:     m.NumBlocks(),
		BlockSize:     m.BlockSize(),
		PrefixCaching: !cfg.DisablePrefixCaching,
		Groups:        groups,
	})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	sched, err := scheduler.New(scheduler.Config{
		MaxNumSeqs:          cfg.MaxNumSeqs,
		MaxNumBatchedTokens: cfg.MaxNumBatchedTokens,
		MaxPromptLogitRows:  cfg.MaxPromptLogitRows,

		LongPrefillTokenThreshold: cfg.LongPrefillTokenThreshold,
	}, pool)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	maxLen := mc.MaxPositionEmbeddings
	if cfg.MaxModelLen > 0 {
		maxLen = min(maxLen, cfg.MaxModelLen)
	}
	maxLen = min(maxLen, pool.MaxTokens())
	eos := slices.Clone(mc.EOSTokenIDs)
	for _, id := range cfg.EOSTokenIDs {
		if !slices.Contains(eos, id) {
			eos = append(eos, id)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	e := &Engine{
		model:    m,
		tok:      tok,
		log:      log,
		vocab:    mc.VocabSize,
		maxLen:   maxLen,
		eos:      eos,
		sched:    sched,
		pool:     pool,
		workers:  runtime.GOMAXPROCS(0),
		pipeline: !cfg.DisablePipelining && (cfg.pipelineHostPicks || pipelines(m)),
		addCh:    make(chan *request, 64),
		closing:  make(chan struct{}),
		abortAll: make(chan struct{}),
		done:     make(chan struct{}),
		failed:   make(chan struct{}),
		masks:    isMaskModel(m),
		live:     map[kvcache.SeqID]*request{},
		stats:    Stats{Finished: map[FinishReason]int64{}},
	}
	e.updateStats()
	log.Info("engine started", "max_model_len", maxLen, "kv_blocks", m.NumBlocks(), "block_size", m.BlockSize(),
		"max_num_seqs", cfg.MaxNumSeqs, "max_batched_tokens", cfg.MaxNumBatchedTokens,
		"long_prefill_token_threshold", cfg.LongPrefillTokenThreshold, "prefix_caching", !cfg.DisablePrefixCaching)
	go e.loop()
	return e, nil
}

// MaxModelLen returns the most tokens (prompt plus output) one request can hold.
func (e *Engine) MaxModelLen() int { return e.maxLen }

// EOSTokenIDs returns the ids that end generation unless a request ignores EOS.
func (e *Engine) EOSTokenIDs() []int32 { return slices.Clone(e.eos) }

// Add queues a request and returns the stream of its outputs. Cancelling ctx aborts the request: it
// finishes with FinishAbort and its KV blocks are freed before the step that follows (Add watches
// ctx with context.AfterFunc until the request ends). Add fails at once with
// ErrPromptTooLong, ErrInvalidRequest, ErrClosed or ErrFailed (wrapped), or with ctx's error if ctx
// ends while the engine's intake is full.
func (e *Engine) Add(ctx context.Context, req Request) (*Stream, error) {
	if err := e.Err(); err != nil {
		return nil, err
	}
	r, err := e.newRequest(req)
	if err != nil {
		return nil, err
	}
	r.unwatch = context.AfterFunc(ctx, func() {
		e.cancelMu.Lock()
		e.cancelled = append(e.cancelled, r)
		e.cancelMu.Unlock()
	})
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		e.drop(r)
		return nil, fmt.Errorf("engine: add request %s: %w", r.stream.id, ErrClosed)
	}
	// A context done already never reaches the loop: in the select below a ready channel would win half
	// the time, and the request could run to its end before its cancellation came round.
	if err := ctx.Err(); err != nil {
		e.drop(r)
		return nil, fmt.Errorf("engine: add request %s: %w", r.stream.id, err)
	}
	select {
	case e.addCh <- r:
		return r.stream, nil
	case <-ctx.Done():
		e.drop(r)
		return nil, fmt.Errorf("engine: add request %s: %w", r.stream.id, ctx.Err())
	}
}

// drop forgets a request Add could not hand to the loop: it stops watching its context, or, if its
// cancellation is already queued, marks it so that the loop discards it.
func (e *Engine) drop(r *request) {
	if !r.unwatch() {
		e.cancelMu.Lock()
		r.dropped = true
		e.cancelMu.Unlock()
	}
}

// newRequest validates req and prepares everything about it that needs no loop state.
func (e *Engine) newRequest(req Request) (*request, error) {
	id := req.ID
	if id == "" {
		id = "req-" + strconv.FormatUint(rand.Uint64(), 36)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("engine: request %s: %s: %w", id, fmt.Sprintf(format, args...), ErrInvalidRequest)
	}
	n := len(req.PromptIDs)
	switch {
	case n == 0:
		return nil, bad("empty prompt")
	case req.MaxTokens < 0:
		return nil, bad("max tokens %d is negative", req.MaxTokens)
	case req.MinTokens < 0:
		return nil, bad("min tokens %d is negative", req.MinTokens)
	case req.TopLogprobs < 0:
		return nil, bad("top logprobs %d is negative", req.TopLogprobs)
	case req.PromptTopLogprobs < 0:
		return nil, bad("prompt top logprobs %d is negative", req.PromptTopLogprobs)
	}
	for i, t := range req.PromptIDs {
		if t < 0 || int(t) >= e.vocab {
			return nil, bad("prompt token %d at index %d is outside the vocabulary of %d", t, i, e.vocab)
		}
	}
	for _, t := range req.StopTokenIDs {
		if t < 0 || int(t) >= e.vocab {
			return nil, bad("stop token %d is outside the vocabulary of %d", t, e.vocab)
		}
	}
	if err := req.Sampling.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	for t := range req.Sampling.LogitBias {
		if t < 0 || int(t) >= e.vocab {
			return nil, bad("logit_bias token %d is outside the vocabulary of %d", t, e.vocab)
		}
	}
	if n >= e.maxLen {
		return nil, fmt.Errorf("engine: request %s: %d prompt tokens leave no room to generate in a context of %d: %w",
			id, n, e.maxLen, ErrPromptTooLong)
	}
	maxTokens := e.maxLen - n
	if req.MaxTokens > 0 {
		maxTokens = min(maxTokens, req.MaxTokens)
	}
	req.PromptIDs = slices.Clone(req.PromptIDs)
	req.Sampling.LogitBias = maps.Clone(req.Sampling.LogitBias)
	req.Stop = slices.Clone(req.Stop)
	req.ID = id

	var stopIDs []int32
	if !req.IgnoreEOS {
		stopIDs = append(stopIDs, e.eos...)
	}
	for _, t := range req.StopTokenIDs {
		if !slices.Contains(stopIDs, t) {
			stopIDs = append(stopIDs, t)
		}
	}
	var minMasked []int32
	if req.MinTokens > 0 {
		minMasked = slices.Clone(e.eos)
		for _, t := range req.StopTokenIDs {
			if !slices.Contains(minMasked, t) {
				minMasked = append(minMasked, t)
			}
		}
	}
	var seed uint64
	if req.Sampling.Seed != nil {
		seed = *req.Sampling.Seed
	} else {
		seed = rand.Uint64()
	}
	var prompt []Logprobs
	if req.PromptLogprobs {
		prompt = make([]Logprobs, n)
	}
	var mask []uint64
	if req.Constraint != nil {
		mask = make([]uint64, (e.vocab+63)/64)
	}
	return &request{
		mask:      mask,
		hostMask:  req.Constraint != nil && !e.masks,
		req:       req,
		prompt:    prompt,
		stream:    newStream(id),
		sampler:   newSampler(req.Sampling, seed, req.PromptIDs),
		seed:      seed,
		detok:     newDetokenizer(e.tok, req.PromptIDs, !req.KeepSpecialTokens),
		stops:     newStopMatcher(req.Stop),
		stopIDs:   stopIDs,
		minMasked: minMasked,
		limits: scheduler.Limits{MaxTokens: maxTokens, MinTokens: req.MinTokens, StopTokenIDs: stopIDs,
			PromptLogits: req.PromptLogprobs},
	}, nil
}

// isMaskModel reports whether m picks masked rows on its side (MaskModel).
func isMaskModel(m Model) bool {
	_, ok := m.(MaskModel)
	return ok
}

// Close stops accepting requests and waits for the in-flight ones to finish. If ctx ends first, the
// rest are aborted (FinishAbort), and Close returns ctx's error once the loop has stopped. Close
// may be called more than once.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.closing)
	}
	e.mu.Unlock()
	select {
	case <-e.done: // stopped already: nothing to abort, whatever ctx says
		return nil
	default:
	}
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		e.abortOnce.Do(func() { close(e.abortAll) })
		<-e.done
		return ctx.Err()
	}
}

// Err returns nil while the engine can serve, and once its model has failed for good (see ErrFailed)
// an error wrapping ErrFailed and the model's error (model.ErrDeviceLost). From then on every request
// fails at once; Close still has to be called.
func (e *Engine) Err() error {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	return e.failErr
}

// Failed returns a channel closed when the engine fails for good (Err is set then): a server watches
// it to stop serving and exit.
func (e *Engine) Failed() <-chan struct{} { return e.failed }

// Stats returns a snapshot of the engine's state as of the last step. Once a request's Output has
// been received, the snapshot includes the step that produced it.
func (e *Engine) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	s := e.stats
	s.Finished = make(map[FinishReason]int64, len(e.stats.Finished))
	for k, v := range e.stats.Finished {
		s.Finished[k] = v
	}
	return s
}
