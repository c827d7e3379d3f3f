package model

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/gollm/gollm/internal/fanout"
	"github.com/gollm/gollm/weights"
)

// ErrInvalidStep is wrapped by Forward's errors when the step's metadata is inconsistent (lengths,
// ranges, block tables too short for the context). Callers that build steps should treat it as a bug.
var ErrInvalidStep = errors.New("invalid step")

// ErrClosed is returned by Forward after Close.
var ErrClosed = errors.New("model closed")

// DefaultBlockSize is the page size, in tokens, used when Options.BlockSize is zero.
const DefaultBlockSize = 16

// Options configures Load.
type Options struct {
	// NumBlocks is the number of KV blocks the backend allocates: each a page of K and V for every layer
	// (for every page array of KVLayout, with KV groups). Zero lets a backend that can measure its memory
	// (the CUDA backend, see KVSizer) fill what is left after the weights and the workspace; the CPU
	// backend needs it positive.
	NumBlocks int
	// BlockSize is the number of tokens per page; zero means DefaultBlockSize.
	BlockSize int
	// Progress, when not nil, is called from Load's goroutine as the weights load: with loaded 0 before
	// the first tensor, after each one, and last with loaded == total. Both count the checkpoint's
	// bytes at its config's dtype (4 bytes a parameter when the config names none), so that a caller
	// can show bytes, a rate and the time left.
	Progress func(loaded, total int64)

	// Device selects Load's backend: "" or "cpu" the pure-Go CPU backend; "cuda" an NVIDIA GPU (binaries
	// built with -tags cuda; an error wrapping ErrNoCUDA otherwise); "auto" the GPU when one can be used,
	// else the CPU. ResolveDevice turns a --device flag into this value.
	Device string
	// DType is the GPU's compute dtype (weight matrices, activations, KV pages): "" the checkpoint's,
	// or "float32", "bfloat16", "float16". float32 computes in IEEE float32 like the CPU reference.
	DType string
	// MemoryUtilization is the share of the GPU's memory the model may fill when NumBlocks is zero;
	// 0 means DefaultMemoryUtilization.
	MemoryUtilization float64
	// MaxStepTokens and MaxLogitRows size the activation workspace reserved before the KV pool when
	// NumBlocks is zero (0: DefaultMaxStepTokens, DefaultMaxLogitRows); a larger step still runs if
	// memory allows.
	MaxStepTokens, MaxLogitRows int
	// DisableCUDAGraphs runs every GPU step op by op instead of replaying decode steps as CUDA graphs.
	DisableCUDAGraphs bool
	// SkipWeightCheck skips the scan of every parameter for NaN and ±Inf that loading does by default
	// (an error wrapping ErrNonFiniteWeight names the first). The scan reads the checkpoint once more,
	// in parallel; skip it only where that time matters, for a checkpoint known to be sound.
	SkipWeightCheck bool

	// Quantization, when QuantizationFP8 ("fp8"), runs the Linear layers as FP8 W8A8 products
	// (FP8Weight): a float32, float16 or bfloat16 checkpoint is quantized at load, one scale per output
	// row (max|w|/448) with inputs scaled per token at run time, the LM head and the embeddings kept
	// in the checkpoint's dtype (vLLM's --quantization fp8, with per-channel weight scales); an FP8
	// checkpoint runs as it is, with or without it. "" runs every checkpoint as it is.
	Quantization string
	// KVCacheDType is the element type of the KV pages: "" or KVCacheAuto the backend's own (float32
	// on the CPU, the compute dtype on a GPU); KVCacheFP8 ("fp8", or "fp8_e4m3") OCP e4m3 with each
	// layer's K and V scales from the checkpoint (k_scale and v_scale, see weights.KVScaleNames), or 1
	// with a warning to Logger where it has none: 1 byte an element, a quarter of the CPU's float32
	// pages and half of a GPU's bfloat16 ones.
	KVCacheDType string
	// Logger receives the loader's warnings; nil means slog.Default().
	Logger *slog.Logger
	// SharedPrefix selects how decode attention treats sequences whose block tables begin with the same
	// pages (n > 1 choices of one prompt, requests behind one preamble): SharedPrefixAuto ("", or "auto") reads
	// the shared pages once for the group where the GPU dispatcher's cost model says it pays
	// (attention.DecideShared; the CPU, whose decode is bound by its products, runs the plain kernels);
	// SharedPrefixOff always runs the plain kernels;
	// SharedPrefixAlways runs the shared-prefix algorithm wherever two decodes share a page. Off and
	// Always exist for tests and benchmarks that compare the two paths.
	SharedPrefix string
	// TensorParallel, when above 1, shards the model over that many ranks Megatron's way (column-parallel
	// Q/K/V and gate/up, row-parallel O and down, the vocabulary split for the embedding and the LM
	// head), each rank with its own KV pages for its heads, run in process over the CPU backend; see
	// parallel. It must divide the attention heads, and divide or be a multiple of the KV heads. 0 and 1
	// run the model whole.
	TensorParallel int
}

// The values of Options.SharedPrefix ("auto" is SharedPrefixAuto too, as the commands spell it).
const (
	SharedPrefixAuto   = ""
	SharedPrefixOff    = "off"
	SharedPrefixAlways = "always"
)

// Step is one forward pass over a flat batch of tokens, vLLM style: prefill chunks and decode tokens of
// several sequences side by side. Sequence s owns token rows QueryStart[s] to QueryStart[s+1]; they are
// its newest tokens, so after the step it has ContextLens[s] tokens in its pages, and the query at row
// QueryStart[s]+i sits at position ContextLens[s]-(QueryStart[s+1]-QueryStart[s])+i (which Positions
// must state). Earlier tokens of the sequence must already be in the cache from earlier steps.
type Step struct {
	Tokens, Positions, SlotMapping []int32   // [T] flat over all sequences in the step
	QueryStart                     []int32   // [S+1]; QueryStart[0] == 0, QueryStart[S] == T
	ContextLens                    []int32   // [S] context length after this step
	BlockTables                    [][]int32 // [S] physical block ids in logical order (KV group 0's)
	LogitRows                      []int32   // token rows whose logits are wanted
	// GroupBlockTables holds the block tables of KV groups 1 and up (KVLayout): [group−1][S], like
	// BlockTables; nil for a model with one group. A sliding group's (or a sliding group 0's) entries
	// for pages that no query of the step attends to may be −1. The slots of groups 1 and up are those
	// of the tokens' positions in their tables.
	GroupBlockTables [][][]int32
	// InputFrom, when not nil, has one entry per token row: −1 (the row's token is Tokens[row]) or the
	// index of the previous step's pick whose token is the row's input (the token Start, ForwardGreedy
	// or ForwardSample chose for that step's logits row InputFrom[row]). It serves pipelined decode: the
	// engine queues a step before it has read the previous step's picks, and the backend feeds them
	// where they are. Tokens[row] is ignored for such rows. The previous step must have been a pick
	// (not Forward) on this model.
	InputFrom []int32
}

// layerWeights holds one decoder layer's parameters as backend handles: the description of a family's
// layer is which of them it has (the zero Weight is an absent one) and the model's activation.
type layerWeights struct {
	inputNorm    Weight // [H]
	qkv          Weight // [Hq*D + 2*Hkv*D][H]: q_proj, k_proj, v_proj stacked (and their biases: Qwen2)
	qNorm, kNorm Weight // [D]: per-head norms of q and k before RoPE (Qwen3, Gemma 3)
	o            Weight // [H][Hq*D]
	attnOutNorm  Weight // [H]: the norm of the attention's output (Gemma's post_attention_layernorm)
	mlpNorm      Weight // [H]: the norm before the MLP (LLaMA's post_attention_layernorm)
	gateUp       Weight // [2I][H]: gate_proj, up_proj stacked
	down         Weight // [H][I]
	mlpOutNorm   Weight // [H]: the norm of the MLP's output (Gemma's post_feedforward_layernorm)
}

// workspace is the set of activation buffers a step uses, sized for capTokens token rows and capLogits
// logit rows; views of their first rows serve smaller steps.
type workspace struct {
	capTokens, capLogits int
	hidden, normed       Tensor // [T][H]
	qkv                  Tensor // [T][QKVCols]
	attn                 Tensor // [T][Hq*D]
	proj                 Tensor // [T][H]: o_proj and down_proj outputs
	gateUp               Tensor // [T][2I]
	act                  Tensor // [T][I]
	picked               Tensor // [R][H]
	logits               Tensor // [R][V]
}

// Model is a loaded model on a backend. It is not safe for concurrent use: one goroutine (the engine's
// step loop) calls Forward.
type Model struct {
	cfg     *weights.Config
	shape   Shape
	backend Backend
	eps     float32
	gelu    bool    // the MLP is GeGLU (else SwiGLU)
	softcap float32 // the final logits' soft cap, or 0

	embed, finalNorm, lmHead Weight
	layers                   []layerWeights

	ws     workspace
	closed bool
	// numPicks is the number of token ids the last step picked (Start, ForwardGreedy, ForwardSample),
	// which the next step's InputFrom may name; 0 after Forward or a failed step. picks holds them when
	// the backend picks on the host (no PickBackend); fed is the step's Tokens with them filled in.
	numPicks   int
	picks, fed []int32
	// pending is set between Begin and its Pick's Commit: no other step may begin then.
	pending bool
	// par, when not nil, holds the ranks of a tensor-parallel model (Options.TensorParallel), which
	// run every step; the Model itself then has no backend.
	par *parallel
}

// Config returns the model's configuration. The caller must not modify it.
func (m *Model) Config() *weights.Config { return m.cfg }

// BlockSize returns the number of tokens per KV page.
func (m *Model) BlockSize() int { return m.shape.BlockSize }

// NumBlocks returns the number of KV blocks (each a page of every layer's K and V).
func (m *Model) NumBlocks() int { return m.shape.NumBlocks }

// Shape returns the geometry the backend was built for.
func (m *Model) Shape() Shape { return m.shape }

// KVBytesPerBlock is the memory one KV block costs on the CPU backend with KV pages of kvCacheDType
// (Options.KVCacheDType: float32, or FP8 e4m3): KVLayout's page arrays (the layers, without sliding
// windows) × 2 × blockSize × Hkv × D × KVElementBytes(kvCacheDType, 4). Divide a memory budget by it to
// size Options.NumBlocks.
func KVBytesPerBlock(cfg *weights.Config, blockSize int, kvCacheDType string) int {
	return KVLayoutOf(cfg).Slots * 2 * blockSize * cfg.NumKeyValueHeads * headDim(cfg) * KVElementBytes(kvCacheDType, 4)
}

// headDim is cfg.HeadDim, or HiddenSize/NumAttentionHeads when the config left it zero.
func headDim(cfg *weights.Config) int {
	if cfg.HeadDim > 0 {
		return cfg.HeadDim
	}
	if cfg.NumAttentionHeads > 0 {
		return cfg.HiddenSize / cfg.NumAttentionHeads
	}
	return 0
}

// Forward runs one step and returns one [VocabSize] row of logits per entry of s.LogitRows, in that
// order. It writes the step's K and V into the pages named by s.SlotMapping. Errors wrap ErrInvalidStep
// for inconsistent metadata, ErrClosed after Close, and ErrDeviceLost when the device can run nothing
// any more.
func (m *Model) Forward(s *Step) ([][]float32, error) {
	m.numPicks = 0
	if m.par != nil {
		return m.forwardParallel(s)
	}
	var flat []float32
	return m.forwardInto(s, &flat)
}

// forwardInto is Forward on a model run whole with its rows in *buf, grown as needed: a tensor-parallel
// rank's step, whose rows live only until its part of the pick or gather is done.
func (m *Model) forwardInto(s *Step, buf *[]float32) ([][]float32, error) {
	logits, err := m.forward(s)
	if err != nil {
		return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
	}
	b, numLogits := m.backend, len(s.LogitRows)
	if numLogits == 0 {
		if err := b.CopyToHost(nil, Tensor{}); err != nil {
			return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
		}
		return [][]float32{}, nil
	}
	out := make([][]float32, numLogits)
	if cap(*buf) < numLogits*m.cfg.VocabSize {
		*buf = make([]float32, numLogits*m.cfg.VocabSize)
	}
	flat := (*buf)[:numLogits*m.cfg.VocabSize]
	for i := range out {
		out[i] = flat[i*m.cfg.VocabSize : (i+1)*m.cfg.VocabSize : (i+1)*m.cfg.VocabSize]
	}
	if err := b.CopyToHost(out, logits); err != nil {
		return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
	}
	return out, nil
}

// PickBackend is implemented by backends that pick each logits row's next token where the logits live
// (the CUDA backend, on the device), so that only token ids cross to the host, and that keep the picks
// there for the next step's InputFrom rows.
type PickBackend interface {
	// PickAsync ends the step like CopyToHost, with a pick per row r of src (the first largest entry
	// when params is nil, else the draw under params[r] by the algorithm of sampleRowCPU) in place of
	// the logits, but returns once the step is queued: wait blocks until the step has ended and dst
	// holds the picks. The next step may be issued before wait is called (at most two steps
	// outstanding); waits come in the order of the steps. A row holding NaN or +Inf is picked as
	// NonFinitePick (pickRowCPU is the twin); a later step's InputFrom row that names such a pick
	// embeds token 0 instead (its sequence is to be ended, and what it computes dropped).
	PickAsync(dst []int32, src Tensor, params []SampleParams) (wait func() error, err error)
	// QueueAsync issues the step's ops up to src (its logits, rows of which are to be picked) without
	// their pick, and returns at once; the step's PickAsync follows, with the same src, before any
	// other step begins (Model.Begin). A greedy pick after it runs without the fused argmax.
	QueueAsync(rows int, src Tensor) error
}

// Pick is a step queued by Start (or Begin, and then Commit): its picked token ids arrive with Wait.
type Pick struct {
	wait func() ([]int32, error) // nil once called
	ids  []int32
	err  error
	// commit queues the pick of a step Begin queued (nil once called, and for a step Start queued
	// whole); rows is its number of logits rows.
	commit func(params []SampleParams) (func() ([]int32, error), error)
	rows   int
}

// NewPick returns a Pick whose Wait returns what wait returns, calling it once: for wrappers of a
// model's Start (benchmarks, tests).
func NewPick(wait func() ([]int32, error)) *Pick { return &Pick{wait: wait} }

// Wait blocks until the step has ended and returns one token id per entry of its LogitRows. Later
// calls return the same.
func (p *Pick) Wait() ([]int32, error) {
	if p.commit != nil {
		// Begun and never committed (a caller giving up on the step): end it with every row's argmax.
		if err := p.Commit(make([]SampleParams, p.rows)); err != nil {
			return nil, err
		}
	}
	if p.wait != nil {
		p.ids, p.err = p.wait()
		p.wait = nil
	}
	return p.ids, p.err
}

// Start runs one step like Forward but ends it with a pick per entry of s.LogitRows: the index of the
// row's largest logit (the first on ties: the greedy next token) when params is nil, else the token drawn
// under params[i] (SampleParams), among the tokens its Mask allows when it has one; NonFinitePick for a
// row whose logits hold NaN or +Inf, on every backend. On a PickBackend only the ids cross to the host, and Start returns as
// soon as the step is queued, so that the next step (whose InputFrom may name these picks) can be queued
// while this one runs: call Wait for the ids, in step order, with at most two steps outstanding. On
// other backends the logits come to the host, the pick is made there, and the step has ended when Start
// returns.
func (m *Model) Start(s *Step, params []SampleParams) (*Pick, error) {
	if s != nil && params != nil && len(params) != len(s.LogitRows) {
		return nil, fmt.Errorf("model: forward: %d sampling parameters for %d logits rows: %w", len(params), len(s.LogitRows), ErrInvalidStep)
	}
	if err := checkMasks(params, m.cfg.VocabSize); err != nil {
		return nil, fmt.Errorf("model: forward: %w", err)
	}
	picker, ok := m.backend.(PickBackend)
	if !ok {
		ids, err := m.pickOnHost(s, params)
		if err != nil {
			return nil, err
		}
		return &Pick{ids: ids}, nil // already ended
	}
	logits, err := m.forward(s)
	if err != nil {
		m.numPicks = 0
		return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
	}
	ids := make([]int32, len(s.LogitRows))
	if len(ids) == 0 {
		logits = Tensor{}
	}
	wait, err := picker.PickAsync(ids, logits, params)
	if err != nil {
		m.numPicks = 0
		return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
	}
	m.numPicks = len(ids)
	return NewPick(func() ([]int32, error) {
		if err := wait(); err != nil {
			return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
		}
		return ids, nil
	}), nil
}

// PicksAsync reports whether Start and Begin return before the step has run: on a PickBackend (the GPU's)
// with the model run whole, whose picks are made on the device. There a step queued before this one's
// picks are read overlaps it (pipelined decode). Elsewhere (the CPU backend, a tensor-parallel model,
// whose ranks' picks meet on the host) the step has run when Start returns, and a step queued before
// its picks are read would only hold them back by its own time.
func (m *Model) PicksAsync() bool {
	_, ok := m.backend.(PickBackend)
	return ok && m.par == nil
}

// pickOnHost is Start on a backend without PickBackend: the step's InputFrom rows get the previous picks
// (kept here), the logits come to the host, and each row is picked there.
// A tensor-parallel model picks greedy rows rank by rank (pickParallelGreedy).
func (m *Model) pickOnHost(s *Step, params []SampleParams) ([]int32, error) {
	s, err := m.feed(s)
	if err != nil {
		return nil, err
	}
	if m.par != nil && s != nil && greedyParams(params) {
		ids, err := m.pickParallelGreedy(s)
		if err != nil {
			m.numPicks = 0
			return nil, err
		}
		m.picks = append(m.picks[:0], ids...)
		m.numPicks = len(ids)
		return ids, nil
	}
	rows, err := m.Forward(s)
	if err != nil {
		return nil, err
	}
	return m.pickRows(rows, params), nil
}

// greedyParams reports whether params pick every row by its argmax over the whole vocabulary (nil
// does).
func greedyParams(params []SampleParams) bool {
	for _, p := range params {
		if p.Mask != nil || p.Temperature >= sampleGreedyEpsilon {
			return false
		}
	}
	return true
}

// feed returns s with its InputFrom rows fed from the previous step's picks (kept here).
func (m *Model) feed(s *Step) (*Step, error) {
	if s == nil || s.InputFrom == nil {
		return s, nil
	}
	if err := m.validateInputFrom(s); err != nil {
		m.numPicks = 0
		return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
	}
	m.fed = append(m.fed[:0], s.Tokens...)
	for row, from := range s.InputFrom {
		if from >= 0 {
			// A NonFinitePick is fed as token 0, as the device's embedding does: the caller ends
			// that sequence when it reads the pick, and drops what this step computes for it.
			m.fed[row] = max(m.picks[from], 0)
		}
	}
	fed := *s
	fed.Tokens, fed.InputFrom = m.fed, nil
	return &fed, nil
}

// pickRows picks each row of logits on the host under params (nil: the argmax), each row masked by its
// params' mask first, and keeps the picks for the next step's InputFrom rows.
func (m *Model) pickRows(rows [][]float32, params []SampleParams) []int32 {
	ids := make([]int32, len(rows))
	cols := 0
	if len(rows) > 0 {
		cols = len(rows[0])
	}
	grain := greedyGrain
	if !greedyParams(params) {
		grain = sampleGrain
	}
	forRows(len(rows), cols, runtime.GOMAXPROCS(0), grain, func(i int) {
		var r sampleRow // greedy
		if params != nil {
			if params[i].Mask != nil {
				MaskLogits(rows[i], params[i].Mask)
			}
			r = prepareSample(params[i])
		}
		ids[i] = pickRowCPU(rows[i], r)
	})
	m.picks = append(m.picks[:0], ids...)
	m.numPicks = len(ids)
	return ids
}

// The values a goroutine of forRows takes at the least: a greedy row's scan costs about a nanosecond a
// value, a sampled row's filters (pickRowCPU's bisections) about a hundred times more, against a
// goroutine's few microseconds.
const (
	greedyGrain = 1 << 19
	sampleGrain = 1 << 12
)

// forRows calls f(i) for every row i of n rows of cols values on up to workers goroutines, as many as
// have grain values each; f must touch its own row's data only.
func forRows(n, cols, workers, grain int, f func(i int)) {
	fanout.Each(min(workers, n*cols/grain), n, f)
}

// ForwardGreedy runs one step like Forward and returns, for each entry of s.LogitRows, the index of its
// largest logit (the first on ties): the greedy next token. It is Start with no sampling parameters,
// waited for.
func (m *Model) ForwardGreedy(s *Step) ([]int32, error) {
	p, err := m.Start(s, nil)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}

// forward validates s and issues every op of the step up to the LM head; it returns the logits rows
// (none when s asks for none), which the caller hands to the backend's step-ending copy.
func (m *Model) forward(s *Step) (Tensor, error) {
	if m.closed {
		return Tensor{}, ErrClosed
	}
	if m.pending {
		return Tensor{}, fmt.Errorf("%w: the step before was begun and its pick not committed", ErrInvalidStep)
	}
	if err := m.validate(s); err != nil {
		return Tensor{}, err
	}
	numTokens, numLogits := len(s.Tokens), len(s.LogitRows)
	if err := m.ensureWorkspace(numTokens, numLogits); err != nil {
		return Tensor{}, err
	}
	b := m.backend
	if err := b.BeginStep(s); err != nil {
		return Tensor{}, err
	}
	w := &m.ws
	hidden := w.hidden.Prefix(numTokens) // the residual stream
	normed := w.normed.Prefix(numTokens)
	qkv := w.qkv.Prefix(numTokens)
	attn := w.attn.Prefix(numTokens)
	proj := w.proj.Prefix(numTokens)
	gateUp := w.gateUp.Prefix(numTokens)
	act := w.act.Prefix(numTokens)

	b.Embed(hidden, m.embed)
	pending := Tensor{} // the last sublayer's output, not yet added to the residual stream
	for l := range m.layers {
		layer := &m.layers[l]
		b.AddRMSNorm(normed, hidden, pending, layer.inputNorm, m.eps)
		b.MatMul(qkv, normed, layer.qkv)
		if layer.qNorm.Data != nil {
			b.QKNorm(qkv, layer.qNorm, layer.kNorm, m.eps)
		}
		b.RoPEWriteKV(qkv, l)
		b.Attention(attn, qkv, l)
		b.MatMul(proj, attn, layer.o)
		m.normOutput(proj, layer.attnOutNorm)
		b.AddRMSNorm(normed, hidden, proj, layer.mlpNorm, m.eps)
		b.MatMul(gateUp, normed, layer.gateUp)
		m.activate(act, gateUp)
		b.MatMul(proj, act, layer.down)
		m.normOutput(proj, layer.mlpOutNorm)
		pending = proj
	}
	b.AddRMSNorm(normed, hidden, pending, m.finalNorm, m.eps)
	if numLogits == 0 {
		return Tensor{}, nil
	}
	logits := w.logits.Prefix(numLogits)
	picked := normed // a decode step wants every row's logits, in order: nothing to gather
	if !identityRows(s.LogitRows, numTokens) {
		picked = w.picked.Prefix(numLogits)
		b.GatherRows(picked, normed, s.LogitRows)
	}
	b.MatMul(logits, picked, m.lmHead)
	if m.softcap > 0 {
		b.Softcap(logits, m.softcap)
	}
	return logits, nil
}

// normOutput normalises a sublayer's output in place before it joins the residual stream, for the
// families whose layers have such a norm (Gemma's); w is the zero Weight for the others.
func (m *Model) normOutput(x Tensor, w Weight) {
	if w.Data != nil {
		m.backend.AddRMSNorm(x, x, Tensor{}, w, m.eps)
	}
}

// activate writes the gated MLP's activation of gateUp into dst: SwiGLU, or GeGLU for Gemma.
func (m *Model) activate(dst, gateUp Tensor) {
	if m.gelu {
		m.backend.GeGLU(dst, gateUp)
	} else {
		m.backend.SwiGLU(dst, gateUp)
	}
}

// ensureWorkspace grows the activation buffers to hold numTokens token rows and numLogits logit rows.
// Capacities grow to the next power of two so that a run of growing prefill chunks reallocates rarely.
func (m *Model) ensureWorkspace(numTokens, numLogits int) error {
	w := &m.ws
	if numTokens > w.capTokens {
		n := nextPow2(numTokens)
		c := m.cfg
		var err error
		alloc := func(cols int) Tensor {
			if err != nil {
				return Tensor{}
			}
			var t Tensor
			t, err = m.backend.NewTensor(n, cols)
			return t
		}
		next := workspace{
			capTokens: n, capLogits: w.capLogits, picked: w.picked, logits: w.logits,
			hidden: alloc(c.HiddenSize), normed: alloc(c.HiddenSize), qkv: alloc(m.shape.QKVCols()),
			attn: alloc(m.shape.NumHeads * m.shape.HeadDim), proj: alloc(c.HiddenSize),
			gateUp: alloc(2 * c.IntermediateSize), act: alloc(c.IntermediateSize),
		}
		if err != nil {
			return fmt.Errorf("workspace for %d tokens: %w", n, err)
		}
		*w = next
	}
	if numLogits > w.capLogits {
		n := nextPow2(numLogits)
		picked, err := m.backend.NewTensor(n, m.cfg.HiddenSize)
		if err != nil {
			return fmt.Errorf("workspace for %d logit rows: %w", n, err)
		}
		logits, err := m.backend.NewTensor(n, m.cfg.VocabSize)
		if err != nil {
			return fmt.Errorf("workspace for %d logit rows: %w", n, err)
		}
		w.capLogits, w.picked, w.logits = n, picked, logits
	}
	return nil
}

// graphBucket is the batch a decode step of n sequences is padded to for its CUDA graph: a power of two
// up to 32, then a multiple of 8 (vLLM's capture sizes), so that the attention plan made for the bucket
// (CUDAKernels.GraphPlan) fits every batch it replays: with power-of-two buckets one 64-row graph served
// batches 33-64, where Llama-3-8B at long contexts wants its attention split just past one wave of the
// grouped kernel's programs and whole at the top (docs/bench/attention-h100.md).
func graphBucket(n int) int {
	if n <= graphPow2Buckets {
		return nextPow2(n)
	}
	return (n + graphBucketStep - 1) / graphBucketStep * graphBucketStep
}

// graphPow2Buckets is the largest power-of-two graph bucket, and graphBucketStep the step of the buckets
// past it (graphBucket).
const (
	graphPow2Buckets = 32
	graphBucketStep  = 8
)

// graphBucketLow is the smallest batch a graph of bucket rows (a graphBucket) serves: one more than the
// bucket below it.
func graphBucketLow(bucket int) int {
	if bucket <= graphPow2Buckets {
		return bucket/2 + 1
	}
	return bucket - graphBucketStep + 1
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// validate checks that s is consistent with itself and with the model, so that backends may trust it.
func (m *Model) validate(s *Step) error {
	if s == nil {
		return fmt.Errorf("%w: nil step", ErrInvalidStep)
	}
	numTokens := len(s.Tokens)
	if numTokens == 0 {
		return fmt.Errorf("%w: no tokens", ErrInvalidStep)
	}
	if len(s.Positions) != numTokens || len(s.SlotMapping) != numTokens {
		return fmt.Errorf("%w: %d tokens but %d positions and %d slots", ErrInvalidStep,
			numTokens, len(s.Positions), len(s.SlotMapping))
	}
	numSeqs := len(s.ContextLens)
	if len(s.QueryStart) != numSeqs+1 || len(s.BlockTables) != numSeqs {
		return fmt.Errorf("%w: %d context lengths need %d query starts and %d block tables, have %d and %d",
			ErrInvalidStep, numSeqs, numSeqs+1, numSeqs, len(s.QueryStart), len(s.BlockTables))
	}
	if groups := max(1, len(m.shape.KVGroups)); len(s.GroupBlockTables) != groups-1 {
		return fmt.Errorf("%w: %d KV groups need %d more block tables per sequence, have %d", ErrInvalidStep,
			groups, groups-1, len(s.GroupBlockTables))
	}
	for g, tables := range s.GroupBlockTables {
		if len(tables) != numSeqs {
			return fmt.Errorf("%w: KV group %d: %d block tables for %d sequences", ErrInvalidStep, g+1, len(tables), numSeqs)
		}
	}
	if s.QueryStart[0] != 0 || int(s.QueryStart[numSeqs]) != numTokens {
		return fmt.Errorf("%w: query starts must run from 0 to %d, run from %d to %d", ErrInvalidStep,
			numTokens, s.QueryStart[0], s.QueryStart[numSeqs])
	}
	vocab := int32(m.cfg.VocabSize)
	blockSize := int32(m.shape.BlockSize)
	for seq := range numSeqs {
		start, end := s.QueryStart[seq], s.QueryStart[seq+1]
		if end < start {
			return fmt.Errorf("%w: sequence %d: query starts decrease (%d then %d)", ErrInvalidStep, seq, start, end)
		}
		queryLen := end - start
		ctx := s.ContextLens[seq]
		if ctx < queryLen {
			return fmt.Errorf("%w: sequence %d: context length %d shorter than its %d step tokens",
				ErrInvalidStep, seq, ctx, queryLen)
		}
		table := s.BlockTables[seq]
		for g := range max(1, len(m.shape.KVGroups)) {
			t := table
			if g > 0 {
				t = s.GroupBlockTables[g-1][seq]
			}
			if err := m.validateTable(g, seq, t, ctx-queryLen, ctx); err != nil {
				return err
			}
		}
		for row := start; row < end; row++ {
			pos := ctx - queryLen + (row - start)
			if s.Positions[row] != pos {
				return fmt.Errorf("%w: sequence %d: token row %d has position %d, want %d",
					ErrInvalidStep, seq, row, s.Positions[row], pos)
			}
			if want := table[pos/blockSize]*blockSize + pos%blockSize; s.SlotMapping[row] != want {
				return fmt.Errorf("%w: sequence %d: token row %d at position %d has slot %d, its block table says %d",
					ErrInvalidStep, seq, row, pos, s.SlotMapping[row], want)
			}
		}
	}
	if s.InputFrom != nil {
		if err := m.validateInputFrom(s); err != nil {
			return err
		}
	}
	for row := range numTokens {
		if s.InputFrom != nil && s.InputFrom[row] >= 0 {
			continue
		}
		if tok := s.Tokens[row]; tok < 0 || tok >= vocab {
			return fmt.Errorf("%w: token row %d: id %d not in [0, %d)", ErrInvalidStep, row, tok, vocab)
		}
	}
	for i, row := range s.LogitRows {
		if row < 0 || int(row) >= numTokens {
			return fmt.Errorf("%w: logit row %d is %d, not in [0, %d)", ErrInvalidStep, i, row, numTokens)
		}
	}
	return nil
}

// validateTable checks sequence seq's block table of KV group g for a step whose first query sits at
// position first and whose context is ctx: it must name a valid block for every page the step's queries
// attend to (all from page 0, or from the window of the first query on in a sliding group).
func (m *Model) validateTable(g, seq int, table []int32, first, ctx int32) error {
	blockSize := int32(m.shape.BlockSize)
	need := (ctx + blockSize - 1) / blockSize
	if int32(len(table)) < need {
		return fmt.Errorf("%w: sequence %d: KV group %d: context length %d needs %d blocks, block table has %d",
			ErrInvalidStep, seq, g, ctx, need, len(table))
	}
	from := int32(0)
	if g < len(m.shape.KVGroups) && m.shape.KVGroups[g] > 0 {
		from = max(0, first-int32(m.shape.KVGroups[g])+1) / blockSize
	}
	for i := from; i < need; i++ {
		if blk := table[i]; blk < 0 || int(blk) >= m.shape.NumBlocks {
			return fmt.Errorf("%w: sequence %d: KV group %d: block table entry %d is %d, not in [0, %d)",
				ErrInvalidStep, seq, g, i, blk, m.shape.NumBlocks)
		}
	}
	return nil
}

// validateInputFrom checks s.InputFrom against the token rows and the previous step's picks.
func (m *Model) validateInputFrom(s *Step) error {
	if len(s.InputFrom) != len(s.Tokens) {
		return fmt.Errorf("%w: %d input sources for %d token rows", ErrInvalidStep, len(s.InputFrom), len(s.Tokens))
	}
	for row, from := range s.InputFrom {
		if from < -1 || int(from) >= m.numPicks {
			return fmt.Errorf("%w: token row %d takes the previous step's pick %d, which picked %d", ErrInvalidStep, row, from, m.numPicks)
		}
	}
	return nil
}

// Close releases the backend and its memory. Forward fails afterwards.
func (m *Model) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	if m.par != nil {
		return m.par.close()
	}
	if err := m.backend.Close(); err != nil {
		return fmt.Errorf("model: close: %w", err)
	}
	return nil
}

// identityRows reports whether rows is 0, 1, …, n−1.
func identityRows(rows []int32, n int) bool {
	if len(rows) != n {
		return false
	}
	for i, r := range rows {
		if int(r) != i {
			return false
		}
	}
	return true
}
