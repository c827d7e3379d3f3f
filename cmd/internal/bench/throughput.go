package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gollm/gollm/engine"
)

// ThroughputOptions configures RunThroughput.
type ThroughputOptions struct {
	// NumPrompts requests, each with a prompt length drawn from InputLen and an output length from
	// OutputLen (EOS ignored).
	NumPrompts          int
	InputLen, OutputLen Range
	// Seed draws the lengths and prompts.
	Seed uint64
	// MaxNumSeqs and MaxNumBatchedTokens are the engine's limits; 0 means its defaults.
	MaxNumSeqs, MaxNumBatchedTokens int
	// DisablePipelining: see LatencyOptions.
	DisablePipelining bool
	// Progress receives a progress bar; nil for none.
	Progress io.Writer
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// Bandwidth and PeakFLOPS set the roofline (ThroughputRoofline); 0 takes the device's figures.
	Bandwidth, PeakFLOPS float64
}

// ThroughputResult is an offline run's measurement.
type ThroughputResult struct {
	Model         string `json:"model"`
	Device        string `json:"device"`
	RandomWeights bool   `json:"random_weights"`
	DType         string `json:"dtype"`
	NumPrompts    int    `json:"num_prompts"`
	InputLen      Range  `json:"input_len"`
	OutputLen     Range  `json:"output_len"`
	MaxNumSeqs    int    `json:"max_num_seqs"`

	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Seconds      float64 `json:"elapsed_s"`
	// RequestsPerSecond, OutputTokensPerSecond and TotalTokensPerSecond (prompt plus output) over
	// the run, from the first request queued to the last token.
	RequestsPerSecond     float64 `json:"requests_s"`
	OutputTokensPerSecond float64 `json:"output_tok_s"`
	TotalTokensPerSecond  float64 `json:"total_tok_s"`
	// Steps is the engine's step count, PipelinedSteps how many of them were queued before the step
	// before had been read (pipelined decode); MeanDecodeBatch the mean number of tokens sampled per step.
	Steps           int64   `json:"steps"`
	PipelinedSteps  int64   `json:"pipelined_steps"`
	MeanDecodeBatch float64 `json:"mean_decode_batch"`
	Preemptions     int     `json:"preemptions"`

	Roofline ThroughputRoofline `json:"roofline"`
}

// RunThroughput queues opts.NumPrompts requests at once and lets the engine's continuous batching run
// them all; the clock runs from the first request queued to the last token received.
func RunThroughput(ctx context.Context, lm *LoadedModel, opts ThroughputOptions) (*ThroughputResult, error) {
	if opts.NumPrompts <= 0 {
		return nil, fmt.Errorf("bench: throughput: %d prompts: %w", opts.NumPrompts, ErrInvalidOptions)
	}
	for _, r := range []Range{opts.InputLen, opts.OutputLen} {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("bench: throughput: %w", err)
		}
	}
	if opts.MaxNumSeqs <= 0 {
		opts.MaxNumSeqs = engine.DefaultMaxNumSeqs
	}
	logger := opts.Logger
	if logger == nil {
		logger = discardLogger
	}
	e, err := engine.New(lm.Model, lm.Tokenizer, engine.Config{
		MaxNumSeqs:          opts.MaxNumSeqs,
		MaxNumBatchedTokens: opts.MaxNumBatchedTokens,
		DisablePipelining:   opts.DisablePipelining,
		Logger:              logger,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: throughput: %w", err)
	}
	defer e.Close(context.Background())
	if need := opts.InputLen.Max + opts.OutputLen.Max; need > e.MaxModelLen() {
		return nil, fmt.Errorf("bench: throughput: %d tokens per sequence exceed the engine's %d (context or KV pages): %w",
			need, e.MaxModelLen(), ErrInvalidOptions)
	}

	rng := rand.New(rand.NewPCG(opts.Seed, 0x7470))
	reqs := make([]engine.Request, opts.NumPrompts)
	res := &ThroughputResult{
		Model: lm.Name, Device: lm.Device.Name, RandomWeights: lm.RandomWeights, DType: lm.Config.DType.String(),
		NumPrompts: opts.NumPrompts, InputLen: opts.InputLen, OutputLen: opts.OutputLen, MaxNumSeqs: opts.MaxNumSeqs,
	}
	wantTokens := 0
	inputs, outputs := make([]int, len(reqs)), make([]int, len(reqs))
	for i := range reqs {
		in, out := opts.InputLen.draw(rng), opts.OutputLen.draw(rng)
		inputs[i], outputs[i] = in, out
		reqs[i] = engine.Request{PromptIDs: randomPrompt(rng, in, lm.Config.VocabSize), MaxTokens: out, IgnoreEOS: true}
		res.PromptTokens += in
		wantTokens += out
	}
	bar := NewProgress(opts.Progress, "throughput", wantTokens, "tokens")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	before := e.Stats()
	start := time.Now()
	errs := make([]error, len(reqs))
	counts := make([]int, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		s, err := e.Add(ctx, req)
		if err != nil {
			cancel()
			wg.Wait()
			bar.Done()
			return nil, fmt.Errorf("bench: throughput: %w", err)
		}
		wg.Go(func() {
			for {
				out, err := s.Recv(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					errs[i] = err
					return
				}
				counts[i] += len(out.TokenIDs)
				bar.Add(len(out.TokenIDs))
				if out.Finished() && out.FinishReason != engine.FinishLength {
					errs[i] = fmt.Errorf("request finished with %q: %v", out.FinishReason, out.Err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	bar.Done()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bench: throughput: %w", err)
	}
	for i, c := range counts {
		if c != reqs[i].MaxTokens {
			return nil, fmt.Errorf("bench: throughput: request %d produced %d tokens, want %d", i, c, reqs[i].MaxTokens)
		}
		res.OutputTokens += c
	}
	res.Seconds = elapsed.Seconds()
	res.RequestsPerSecond = float64(len(reqs)) / res.Seconds
	res.OutputTokensPerSecond = float64(res.OutputTokens) / res.Seconds
	res.TotalTokensPerSecond = float64(res.PromptTokens+res.OutputTokens) / res.Seconds
	e.Close(context.Background()) // the loop's last statistics are final once it has stopped
	after := e.Stats()
	res.Steps = after.Steps - before.Steps
	res.PipelinedSteps = after.PipelinedSteps - before.PipelinedSteps
	if res.Steps > 0 {
		res.MeanDecodeBatch = float64(after.GenerationTokens-before.GenerationTokens) / float64(res.Steps)
	}
	res.Preemptions = after.Preemptions - before.Preemptions
	bw, peak := opts.Bandwidth, opts.PeakFLOPS
	if bw <= 0 && lm.Device.MeasureBandwidth != nil {
		bw, _ = ResolveBandwidth(lm.Device, 0) // the GPU's; none on the CPU
	}
	if peak <= 0 {
		peak = lm.Device.PeakFLOPS
	}
	res.Roofline = throughputRoofline(lm.rooflineConfig(), lm.Precision, inputs, outputs, opts.MaxNumSeqs, peak, bw)
	if res.Roofline.BoundS > 0 {
		res.Roofline.Percent = 100 * res.Roofline.BoundS / res.Seconds
	}
	return res, nil
}
