package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/weights"
)

// LatencyOptions configures RunLatency.
type LatencyOptions struct {
	// Batch sequences of InputLen prompt tokens each generate OutputLen tokens (EOS ignored).
	Batch, InputLen, OutputLen int
	// Warmup iterations run first and are discarded; Iterations are measured (at least 1).
	Warmup, Iterations int
	// Seed draws the prompts.
	Seed uint64
	// MaxNumBatchedTokens is the engine's per-step token budget (vLLM's max_num_batched_tokens): a
	// prompt longer than it is prefilled in chunks of it over several steps. 0 means the engine's
	// default.
	MaxNumBatchedTokens int
	// DisablePipelining runs every decode step after the previous one's tokens are read (engine
	// Config.DisablePipelining), for comparison.
	DisablePipelining bool
	// Bandwidth is the roofline's copy bandwidth in bytes per second, BandwidthSource says where it
	// came from ("measured (device copy)", "measured", "flag", …); see ResolveBandwidth.
	Bandwidth       float64
	BandwidthSource string
	// Progress receives a progress bar; nil for none.
	Progress io.Writer
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
}

// LatencyResult is one batch size's measurement. Times are in milliseconds.
type LatencyResult struct {
	Model         string    `json:"model"`
	Device        string    `json:"device"`
	RandomWeights bool      `json:"random_weights"`
	DType         string    `json:"dtype"`
	Precision     Precision `json:"precision"`
	Params        int64     `json:"params"`
	Batch         int       `json:"batch"`
	InputLen      int       `json:"input_len"`
	OutputLen     int       `json:"output_len"`
	Iterations    int       `json:"iterations"`

	// MaxNumBatchedTokens is the engine's token budget per step that the run had: the prefill chunk.
	MaxNumBatchedTokens int `json:"max_num_batched_tokens"`

	// PrefillMS is the median time from the batch's start until every sequence had its first token:
	// the time to first token (TTFT) of the batch's last sequence, every prefill chunk included.
	// PrefillTokensPerSecond is the batch's prompt tokens over it.
	PrefillMS              float64 `json:"prefill_ms"`
	PrefillTokensPerSecond float64 `json:"prefill_tok_s"`
	// DecodeStep is the wall time of each decode step that ran the whole batch, from the end of the
	// step before (its tokens read) to this one's end: the interval between two tokens of a sequence,
	// the engine's scheduling, metadata, sampling and streaming included.
	DecodeStep Summary `json:"decode_step"`
	// DecodeStepsMS is every one of those steps' wall time in order, iteration after iteration: where
	// a tail (p99) comes from.
	DecodeStepsMS []float64 `json:"decode_steps_ms,omitempty"`
	// DecodeForward is the time the engine spent in the model's calls in those steps: Forward, or a
	// pick's Start and its Wait (a pipelined step's Start returns before the step ends; the engine
	// reads its picks after it has queued the next one).
	DecodeForward Summary `json:"decode_forward"`
	// EngineOverheadMS is the median of (step − DecodeForward): the engine's own host work per step.
	// With pipelined decode it runs while the device computes the next step, so it costs the step
	// nothing unless it outlasts it.
	EngineOverheadMS float64 `json:"engine_overhead_ms"`
	// BackendHostMS is the median host time inside Forward, when the model tells (HostTimer).
	BackendHostMS *float64 `json:"backend_host_ms,omitempty"`
	// CPUUtilization is the process's CPU time over the measured iterations' wall time and
	// GOMAXPROCS, in percent: below 100 on the CPU backend means the machine was shared (0: unknown).
	CPUUtilization float64 `json:"cpu_utilization_percent,omitempty"`
	// TotalMS is the median time of a whole iteration, first token to last.
	TotalMS float64 `json:"total_ms"`
	// OutputTokensPerSecond is Batch × OutputLen over TotalMS; DecodeTokensPerSecond is Batch over
	// the median decode step.
	OutputTokensPerSecond float64 `json:"output_tok_s"`
	DecodeTokensPerSecond float64 `json:"decode_tok_s"`

	Roofline RooflineReport `json:"roofline"`
}

// RooflineReport sets a decode step beside the least time its bytes allow.
type RooflineReport struct {
	// Context is the mean context length of the measured decode steps, rounded (Bytes is exact).
	Context int `json:"context"`
	// Bytes is what a step at that context must read.
	Bytes StepBytes `json:"bytes"`
	// Bandwidth (bytes read plus written per second) and where it came from.
	Bandwidth       float64 `json:"bandwidth_bytes_s"`
	BandwidthSource string  `json:"bandwidth_source"`
	// StepMS is Bytes.Total / Bandwidth, TokensPerSecond the batch over it.
	StepMS          float64 `json:"step_ms"`
	TokensPerSecond float64 `json:"tok_s"`
	// Percent is StepMS over the measured median step, in percent.
	Percent float64 `json:"percent"`
}

// ProbeBytes is the buffer size of the host bandwidth probe: beyond the last-level cache of the
// machines we measure on (the 2-core dev box reports a 260 MiB L3; at 64 MiB it measured 1.6× its DRAM
// bandwidth).
const ProbeBytes = 512 << 20

// ResolveBandwidth picks the roofline bandwidth: the flag when positive, else the device's fixed figure,
// else a measurement: the device's own (the GPU's copy bandwidth; when that fails, the H100's figure,
// the failure named in the source), or host memory with ProbeBytes buffers (about a second, 1 GiB
// allocated).
func ResolveBandwidth(dev Device, flag float64) (float64, string) {
	switch {
	case flag > 0:
		return flag, "flag"
	case dev.Bandwidth > 0:
		return dev.Bandwidth, dev.Name + " default"
	case dev.MeasureBandwidth != nil:
		bw, err := dev.MeasureBandwidth()
		if err != nil || !(bw > 0) {
			return H100CopyBandwidth, fmt.Sprintf("H100 default (not measured: %v)", err)
		}
		return bw, "measured (device copy)"
	}
	return MeasureCopyBandwidth(ProbeBytes, 5), "measured"
}

// discardLogger is the engine's logger when the caller gives none.
var discardLogger = slog.New(slog.DiscardHandler)

// RunLatency times opts.Batch sequences through the engine: all queued before the engine takes its
// first step, each generating exactly opts.OutputLen tokens. The model must hold BlocksFor(Batch,
// InputLen+OutputLen, block size) KV pages.
func RunLatency(ctx context.Context, lm *LoadedModel, opts LatencyOptions) (*LatencyResult, error) {
	if opts.Batch <= 0 || opts.InputLen <= 0 || opts.OutputLen <= 0 || opts.Warmup < 0 {
		return nil, fmt.Errorf("bench: latency: batch %d, input %d, output %d, warmup %d: %w",
			opts.Batch, opts.InputLen, opts.OutputLen, opts.Warmup, ErrInvalidOptions)
	}
	opts.Iterations = max(opts.Iterations, 1)
	if opts.MaxNumBatchedTokens <= 0 {
		opts.MaxNumBatchedTokens = engine.DefaultMaxNumBatchedTokens
	}
	opts.MaxNumBatchedTokens = max(opts.MaxNumBatchedTokens, opts.Batch) // as engine.New raises it
	logger := opts.Logger
	if logger == nil {
		logger = discardLogger
	}
	tm := newTimedModel(lm.Model)
	e, err := engine.New(tm.engineModel(), lm.Tokenizer, engine.Config{
		MaxNumSeqs:           opts.Batch,
		MaxNumBatchedTokens:  opts.MaxNumBatchedTokens,
		DisablePrefixCaching: true,
		DisablePipelining:    opts.DisablePipelining,
		Logger:               logger,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: latency: %w", err)
	}
	defer e.Close(context.Background())
	if need := opts.InputLen + opts.OutputLen; need > e.MaxModelLen() {
		return nil, fmt.Errorf("bench: latency: %d tokens per sequence exceed the engine's %d (context or KV pages): %w",
			need, e.MaxModelLen(), ErrInvalidOptions)
	}

	rng := rand.New(rand.NewPCG(opts.Seed, 0xbe1c4))
	total := (opts.Warmup + opts.Iterations) * opts.Batch * opts.OutputLen
	bar := NewProgress(opts.Progress, fmt.Sprintf("latency batch %d", opts.Batch), total, "tokens")
	var its []latencyIteration
	var cpu, wall time.Duration
	for i := range opts.Warmup + opts.Iterations {
		prompts := make([][]int32, opts.Batch)
		for j := range prompts {
			prompts[j] = randomPrompt(rng, opts.InputLen, lm.Config.VocabSize)
		}
		cpu0, wall0 := processCPUTime(), time.Now()
		it, err := runLatencyIteration(ctx, e, tm, prompts, opts.OutputLen, bar)
		if err != nil {
			bar.Done()
			return nil, fmt.Errorf("bench: latency: batch %d: %w", opts.Batch, err)
		}
		if i >= opts.Warmup {
			its = append(its, it)
			cpu += processCPUTime() - cpu0
			wall += time.Since(wall0)
		}
	}
	bar.Done()
	r := summarizeLatency(lm, opts, its)
	if cpu > 0 && wall > 0 {
		r.CPUUtilization = 100 * cpu.Seconds() / wall.Seconds() / float64(runtime.GOMAXPROCS(0))
	}
	return r, nil
}

// latencyIteration is what one run of the batch measured.
type latencyIteration struct {
	prefill, total time.Duration
	steps          []stepTiming // the decode steps that ran the whole batch
}

// stepTiming is one decode step: its wall time, its Forward, the backend's host time (-1 unknown)
// and the sum of its sequences' contexts.
type stepTiming struct {
	wall, forward, host time.Duration
	contextSum          int
}

// runLatencyIteration queues the batch behind a one-token request held at the model's gate, so the
// engine sees every sequence at once, then releases it and reads every stream to the end.
func runLatencyIteration(ctx context.Context, e *engine.Engine, tm *timedModel, prompts [][]int32, outputLen int, bar *Progress) (latencyIteration, error) {
	tm.takeSteps()
	entered, release := tm.holdNext()
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	opener, err := e.Add(ctx, engine.Request{ID: "gate", PromptIDs: []int32{0}, MaxTokens: 1, IgnoreEOS: true})
	if err != nil {
		return latencyIteration{}, err
	}
	select {
	case <-entered:
	case <-ctx.Done():
		return latencyIteration{}, ctx.Err()
	}

	// Queue the batch while the engine waits at the gate. The engine's intake is bounded: when it is
	// full, Add blocks until the engine runs, so the gate opens once the adds stop making progress.
	streams := make([]*engine.Stream, len(prompts))
	addErrs := make(chan error, 1)
	progress := make(chan struct{}, len(prompts))
	go func() {
		for i, p := range prompts {
			s, err := e.Add(ctx, engine.Request{PromptIDs: p, MaxTokens: outputLen, IgnoreEOS: true})
			if err != nil {
				addErrs <- err
				return
			}
			streams[i] = s
			progress <- struct{}{}
		}
		addErrs <- nil
	}()
	added := 0
	var addErr error
	addsDone := false
wait:
	for added < len(prompts) {
		select {
		case <-progress:
			added++
		case addErr = <-addErrs:
			addsDone = true
			break wait
		case <-time.After(50 * time.Millisecond):
			break wait
		}
	}
	release()
	if !addsDone {
		addErr = <-addErrs
	}
	if addErr != nil {
		return latencyIteration{}, addErr
	}
	if err := drain(opener); err != nil {
		return latencyIteration{}, err
	}

	type seqResult struct {
		first, last time.Time
		tokens      int
		err         error
	}
	results := make([]seqResult, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() {
			r := &results[i]
			for {
				out, err := s.Recv(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					r.err = err
					return
				}
				now := time.Now()
				if n := len(out.TokenIDs); n > 0 {
					if r.tokens == 0 {
						r.first = now
					}
					r.last = now
					r.tokens += n
					bar.Add(n)
				}
				if out.Finished() && out.FinishReason != engine.FinishLength {
					r.err = fmt.Errorf("request finished with %q after %d tokens: %v", out.FinishReason, r.tokens, out.Err)
				}
			}
		})
	}
	wg.Wait()
	steps := tm.takeSteps()
	if len(steps) == 0 {
		return latencyIteration{}, errors.New("the engine ran no step")
	}
	var it latencyIteration
	start := steps[0].end // the gate request's step: the batch was queued while it ran
	var firstDone, lastDone time.Time
	for _, r := range results {
		if r.err != nil {
			return latencyIteration{}, r.err
		}
		if r.tokens != outputLen {
			return latencyIteration{}, fmt.Errorf("a request produced %d tokens, want %d", r.tokens, outputLen)
		}
		if r.first.After(firstDone) {
			firstDone = r.first
		}
		if r.last.After(lastDone) {
			lastDone = r.last
		}
	}
	it.prefill, it.total = firstDone.Sub(start), lastDone.Sub(start)
	for j, st := range steps[1:] {
		if st.seqs != len(prompts) || !st.decodeOnly {
			continue
		}
		host := time.Duration(-1)
		if st.host >= 0 {
			host = st.host
		}
		// From the step before's end (its tokens read) to this one's: the interval between two tokens of
		// a sequence. (Start to start would give the first decode step part of the prefill and the last
		// the step before it, since a pipelined step starts before the previous one's tokens are read.)
		it.steps = append(it.steps, stepTiming{wall: st.end.Sub(steps[j].end), forward: st.inModel, host: host,
			contextSum: st.contextSum})
	}
	return it, nil
}

// drain reads a stream to its end.
func drain(s *engine.Stream) error {
	for {
		out, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if out.FinishReason == engine.FinishError {
			return out.Err
		}
	}
}

// summarizeLatency pools the iterations' steps and sets them against the roofline.
func summarizeLatency(lm *LoadedModel, opts LatencyOptions, its []latencyIteration) *LatencyResult {
	r := &LatencyResult{
		Model: lm.Name, Device: lm.Device.Name, RandomWeights: lm.RandomWeights, DType: lm.Config.DType.String(),
		Precision: lm.Precision, Params: CountParams(lm.Config).Total,
		Batch: opts.Batch, InputLen: opts.InputLen, OutputLen: opts.OutputLen, Iterations: len(its),
		MaxNumBatchedTokens: opts.MaxNumBatchedTokens,
	}
	var prefill, total, wall, forward, overhead, host []time.Duration
	contextSum, numSteps := 0, 0
	for _, it := range its {
		prefill = append(prefill, it.prefill)
		total = append(total, it.total)
		for _, st := range it.steps {
			wall = append(wall, st.wall)
			r.DecodeStepsMS = append(r.DecodeStepsMS, float64(st.wall)/float64(time.Millisecond))
			forward = append(forward, st.forward)
			overhead = append(overhead, st.wall-st.forward)
			if st.host >= 0 {
				host = append(host, st.host)
			}
			contextSum += st.contextSum
			numSteps++
		}
	}
	r.PrefillMS = Summarize(prefill).P50
	if r.PrefillMS > 0 {
		r.PrefillTokensPerSecond = float64(opts.Batch*opts.InputLen) / (r.PrefillMS / 1e3)
	}
	r.TotalMS = Summarize(total).P50
	if r.TotalMS > 0 {
		r.OutputTokensPerSecond = float64(opts.Batch*opts.OutputLen) / (r.TotalMS / 1e3)
	}
	r.DecodeStep = Summarize(wall)
	r.DecodeForward = Summarize(forward)
	r.EngineOverheadMS = Summarize(overhead).P50
	if len(host) > 0 {
		h := Summarize(host).P50
		r.BackendHostMS = &h
	}
	if r.DecodeStep.P50 > 0 {
		r.DecodeTokensPerSecond = float64(opts.Batch) / (r.DecodeStep.P50 / 1e3)
	}

	// The roofline at the steps' mean context (bytes grow linearly with it, so this is the mean
	// step's bytes; within a sliding window they stop growing, and the window's layers are counted at
	// the mean context); with no full-batch decode step (one output token), at the context the first
	// decode step would have had.
	rf := &r.Roofline
	rf.Context = opts.InputLen + 1
	rf.Bytes = DecodeStepBytes(lm.rooflineConfig(), lm.Precision, UniformContexts(opts.Batch, rf.Context))
	if numSteps > 0 {
		rf.Context = int(float64(contextSum)/float64(numSteps*opts.Batch) + 0.5)
		rf.Bytes.KV = meanStepKV(lm.rooflineConfig(), lm.Precision.KVBytes, opts.Batch, contextSum, numSteps, rf.Context)
		rf.Bytes.Total = rf.Bytes.Weights + rf.Bytes.EmbeddingRows + rf.Bytes.KV
	}
	rf.Bandwidth, rf.BandwidthSource = opts.Bandwidth, opts.BandwidthSource
	if s := RooflineSeconds(rf.Bytes.Total, rf.Bandwidth); s > 0 {
		rf.StepMS = s * 1e3
		rf.TokensPerSecond = float64(opts.Batch) / s
		if r.DecodeStep.P50 > 0 {
			rf.Percent = 100 * rf.StepMS / r.DecodeStep.P50
		}
	}
	return r
}

// RunLatencySweep runs RunLatency for each batch size in turn (the model must hold the pages of the
// largest).
func RunLatencySweep(ctx context.Context, lm *LoadedModel, batches []int, opts LatencyOptions) ([]*LatencyResult, error) {
	var out []*LatencyResult
	for _, b := range slices.Clone(batches) {
		o := opts
		o.Batch = b
		r, err := RunLatency(ctx, lm, o)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// meanStepKV is the K and V a mean decode step of batch sequences reads, from the contexts' sum over
// numSteps steps: exact for full-attention layers, at the mean context meanCtx for sliding ones.
func meanStepKV(cfg *weights.Config, kvBytes, batch, contextSum, numSteps, meanCtx int) int64 {
	perLayerToken := kvBytesPerLayerToken(cfg, kvBytes)
	var full, sliding int64 // full-attention layers; keys the sliding layers read per sequence
	for l := range cfg.NumHiddenLayers {
		if w := cfg.LayerWindow(l); w > 0 {
			sliding += int64(min(meanCtx, w))
		} else {
			full++
		}
	}
	return int64(contextSum)*full*perLayerToken/int64(numSteps) + int64(batch)*sliding*perLayerToken
}
