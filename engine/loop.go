package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/gollm/gollm/internal/fanout"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/scheduler"
)

// loop is the step goroutine: it owns the scheduler, the KV pool and every request's state. Each
// turn ends with deliver, so the outputs of a turn reach their streams after the stats snapshot
// already counts them.
func (e *Engine) loop() {
	defer close(e.done)
	for {
		if !e.sched.HasUnfinished() && e.ahead == nil {
			// Idle: wait for work or for Close.
			select {
			case r := <-e.addCh:
				e.admit(r)
			case <-e.closing:
			case <-e.abortAll:
			}
		}
		// Read closing before draining the intake: once it is closed, no Add can send any more, so
		// the drain below sees every request that will ever arrive.
		closing := isClosed(e.closing)
		e.drainIntake()
		if isClosed(e.abortAll) {
			e.abortEverything(ErrClosed)
			e.settleAhead()
			e.deliver()
			return
		}
		e.reapCancelled()
		if !e.sched.HasUnfinished() && e.ahead == nil {
			e.deliver()
			if closing {
				return
			}
			continue
		}
		e.runStep()
		e.deliver()
	}
}

// send queues an output for r's stream; deliver hands it over at the end of the loop's turn.
func (e *Engine) send(r *request, out Output) {
	e.outbox = append(e.outbox, delivery{r.stream, out})
}

// deliver refreshes the stats snapshot, then pushes the turn's outputs to their streams.
func (e *Engine) deliver() {
	e.updateStats()
	for i, d := range e.outbox {
		d.stream.push(d.out)
		e.outbox[i] = delivery{}
	}
	e.outbox = e.outbox[:0]
}

// delivery is one output waiting in the outbox.
type delivery struct {
	stream *Stream
	out    Output
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// drainIntake admits every request waiting in the intake channel.
func (e *Engine) drainIntake() {
	for {
		select {
		case r := <-e.addCh:
			e.admit(r)
		default:
			return
		}
	}
}

// admit gives a new request its sequence id and queues it in the scheduler; once the engine has
// failed it fails the request at once.
func (e *Engine) admit(r *request) {
	if err := e.Err(); err != nil {
		e.finish(r, FinishError, err, Output{})
		return
	}
	e.nextID++
	r.id = e.nextID
	r.seq = scheduler.NewSequence(r.id, r.req.PromptIDs, r.limits)
	if err := e.sched.Add(r.seq); err != nil {
		if errors.Is(err, scheduler.ErrTooLong) {
			err = fmt.Errorf("engine: request %s: %w: %w", r.req.ID, ErrPromptTooLong, err)
		}
		e.finish(r, FinishError, err, Output{})
		return
	}
	e.live[r.id] = r
	e.log.Debug("request added", "id", r.req.ID, "seq", r.id, "prompt_tokens", len(r.req.PromptIDs),
		"max_tokens", r.limits.MaxTokens)
}

// reapCancelled aborts the requests whose Add context has ended; their blocks are freed now. A
// request cancelled before the loop has taken it from the intake waits for a later turn.
func (e *Engine) reapCancelled() {
	e.cancelMu.Lock()
	defer e.cancelMu.Unlock()
	kept := e.cancelled[:0]
	for _, r := range e.cancelled {
		switch {
		case r.dropped:
		case r.id == 0: // still in the intake
			kept = append(kept, r)
		case e.live[r.id] == r:
			e.abort(r, nil)
		}
	}
	clear(e.cancelled[len(kept):])
	e.cancelled = kept
}

// abortEverything aborts every live request and every request still in the intake.
func (e *Engine) abortEverything(cause error) {
	for _, r := range e.live {
		e.abort(r, cause)
	}
	for {
		select {
		case r := <-e.addCh:
			e.finish(r, FinishAbort, cause, Output{})
		default:
			return
		}
	}
}

// abort finishes a live request with FinishAbort.
func (e *Engine) abort(r *request, cause error) {
	if !r.seq.Finished() {
		if err := e.sched.Finish(r.seq, scheduler.FinishAbort); err != nil {
			panic(fmt.Sprintf("engine: abort %s: %v", r.req.ID, err)) // the loop's books disagree with the scheduler's
		}
	}
	e.finish(r, FinishAbort, cause, Output{Text: r.rest()})
}

// rest returns the text r has produced but not streamed, for a request that ends for a reason other
// than its own tokens (abort, a failed step): what was held back as a possible beginning of a stop
// string, and what the detokenizer holds (an incomplete character, an open run of byte tokens), are
// output after all.
func (r *request) rest() string {
	text := r.held + r.detok.flush()
	r.held = ""
	return text
}

// finish sends a request's last output and forgets it. The scheduler must already have finished its
// sequence (if it has one).
func (e *Engine) finish(r *request, reason FinishReason, err error, out Output) {
	out.FinishReason = reason
	out.Err = err
	if r.seq != nil {
		out.Usage = usageOf(r.seq)
	} else {
		out.Usage = Usage{PromptTokens: len(r.req.PromptIDs)}
	}
	delete(e.live, r.id)
	if r.unwatch != nil {
		r.unwatch()
	}
	e.statsMu.Lock()
	e.stats.Finished[reason]++
	e.statsMu.Unlock()
	e.send(r, out)
	level := e.log.Debug
	if reason == FinishError {
		level = e.log.Warn
	}
	level("request finished", "id", r.req.ID, "reason", reason, "prompt_tokens", out.Usage.PromptTokens,
		"completion_tokens", out.Usage.CompletionTokens, "cached_tokens", out.Usage.CachedTokens, "err", err)
}

func usageOf(seq *scheduler.Sequence) Usage {
	return Usage{
		PromptTokens:     seq.NumPromptTokens(),
		CompletionTokens: seq.NumOutputTokens(),
		CachedTokens:     seq.NumCachedTokens(),
	}
}

// inflight is a step queued on a PickModel whose picks the loop has not read yet. A step with
// constrained rows queued ahead of the previous step's tokens is begun (MaskModel) and waits for its
// masks: params holds its rows' sampling parameters until commit fills in the masks and commits it.
type inflight struct {
	b      *scheduler.Batch
	pick   *model.Pick
	params []model.SampleParams
}

// runStep runs one step: schedule, forward, sample, update, postprocess. A step whose tokens the model
// picks on its device (PickModel) is queued, and before its picks are read the step after it is planned
// (Scheduler.ScheduleNext: decodes, prefills under way, admissions) and queued too, its decodes' input
// tokens fed from those picks on the device: the host's bookkeeping of step N (update, detokenize,
// stream) then runs while step N+1 computes, and that step is read in the next turn. Anything
// ScheduleNext does not cover (preemption, logits on the host) waits for a plain step.
//
// Constrained rows pick on the device too (MaskModel): a plain step is begun, its masks computed
// while it runs and then committed; a step queued ahead is begun before the tokens its masks depend on
// are read, and committed once apply has fed them to the constraints, while its forward runs.
func (e *Engine) runStep() {
	cur := e.ahead
	e.ahead = nil
	if cur == nil {
		b := e.schedule()
		if b == nil {
			return
		}
		st := e.buildStep(b)
		pm, params, ok := e.pickParams(b)
		if !ok {
			sampled, err := e.forwardOnHost(b, st)
			if err != nil {
				e.failStep(err, b)
				return
			}
			e.apply(b, sampled)
			return
		}
		var pick *model.Pick
		var err error
		if cons := e.constrained(b); len(cons) > 0 {
			masks := e.startMasks(cons)
			pick, err = pm.(MaskModel).Begin(st)
			masks.Wait()
			if err == nil {
				e.fillMasks(b, params)
				err = pick.Commit(params)
				if err != nil {
					_, _ = pick.Wait()
				}
			}
		} else {
			pick, err = pm.Start(st, params)
		}
		if err != nil {
			e.failStep(err, b)
			return
		}
		cur = &inflight{b: b, pick: pick}
	}
	if e.pipeline {
		e.ahead = e.startNext(cur.b)
	}
	ids, err := cur.pick.Wait()
	if err == nil && len(ids) != cur.b.NumLogits {
		err = fmt.Errorf("forward returned %d tokens for %d", len(ids), cur.b.NumLogits)
	}
	if err != nil {
		if next := e.ahead; next != nil {
			e.ahead = nil
			_, _ = next.pick.Wait() // fed from the failed step: its tokens mean nothing
		}
		e.failStep(err, cur.b) // undoes the step queued after it too
		return
	}
	e.apply(cur.b, ids)
	if next := e.ahead; next != nil && next.params != nil {
		e.commit(next)
	}
}

// commit computes the masks of f's constrained rows (those still live: the constraints have taken the
// tokens of the step before) and commits f's pick. A failed commit ends the step with an error that
// its Wait returns.
func (e *Engine) commit(f *inflight) {
	e.startMasks(e.constrained(f.b)).Wait()
	e.fillMasks(f.b, f.params)
	_ = f.pick.Commit(f.params)
	f.params = nil
}

// constrained returns the live requests of b's logits rows that have a constraint, in row order.
func (e *Engine) constrained(b *scheduler.Batch) []*request {
	var out []*request
	for _, c := range b.Chunks {
		if !c.NeedsLogits {
			continue
		}
		if r := e.live[c.Seq.ID()]; r != nil && r.req.Constraint != nil {
			out = append(out, r)
		}
	}
	return out
}

// fillMasks sets the Mask of each of b's logits rows in params: its request's mask (computeMask) when
// it has a constraint and is live, else none (a finished request's row is dropped anyway).
func (e *Engine) fillMasks(b *scheduler.Batch, params []model.SampleParams) {
	k := 0
	for _, c := range b.Chunks {
		if !c.NeedsLogits {
			continue
		}
		params[k].Mask = nil
		if r := e.live[c.Seq.ID()]; r != nil && r.req.Constraint != nil {
			params[k].Mask = r.mask
		}
		k++
	}
}

// schedule plans a plain step and reports what planning it finished or preempted; nil when there is
// nothing to run.
func (e *Engine) schedule() *scheduler.Batch {
	preemptedBefore := e.sched.NumPreemptions()
	b := e.sched.Schedule()
	for _, seq := range b.Finished {
		if r := e.live[seq.ID()]; r != nil {
			e.finish(r, FinishError, seq.Err(), Output{})
		}
	}
	if n := e.sched.NumPreemptions() - preemptedBefore; n > 0 {
		e.log.Warn("KV cache full: sequences preempted, to be recomputed", "preempted", n,
			"running", e.sched.NumRunning(), "waiting", e.sched.NumWaiting())
	}
	if b.Empty() {
		return nil
	}
	return b
}

// startNext queues the step after prev (in flight, its picks unread) when the scheduler can plan it
// now; nil when it cannot or the model refused it (the next turn then runs a plain step).
func (e *Engine) startNext(prev *scheduler.Batch) *inflight {
	next := e.sched.ScheduleNext(prev)
	if next == nil {
		return nil
	}
	pm, params, ok := e.pickParams(next)
	if !ok {
		// A sequence it admits needs its logits on the host (penalties, logprobs): cancelling the
		// step puts it back in the queue, and the next turn plans plainly.
		if derr := e.sched.Discard(next); derr != nil {
			panic(fmt.Sprintf("engine: %v", derr))
		}
		return nil
	}
	var pick *model.Pick
	var err error
	deferred := len(e.constrained(next)) > 0
	if deferred {
		// Its masks depend on the tokens of prev, not read yet: begun now, committed after apply.
		pick, err = pm.(MaskModel).Begin(e.buildStep(next))
	} else {
		pick, err = pm.Start(e.buildStep(next), params)
	}
	if err != nil {
		// Not expected: plan plainly instead.
		e.log.Warn("pipelined step not started", "err", err)
		if derr := e.sched.Discard(next); derr != nil {
			panic(fmt.Sprintf("engine: %v", derr))
		}
		return nil
	}
	e.statsMu.Lock()
	e.stats.PipelinedSteps++
	e.statsMu.Unlock()
	f := &inflight{b: next, pick: pick}
	if deferred {
		f.params = params
	}
	return f
}

// settleAhead waits for a step still in flight and applies it to the scheduler's books (its sequences
// are finished by then, so nothing is streamed), so that nothing runs on the model once the loop ends.
func (e *Engine) settleAhead() {
	cur := e.ahead
	e.ahead = nil
	if cur == nil {
		return
	}
	ids, err := cur.pick.Wait()
	if err == nil && len(ids) == cur.b.NumLogits {
		_, err = e.sched.Update(cur.b, ids)
	} else {
		err = e.sched.Discard(cur.b)
	}
	if err != nil {
		panic(fmt.Sprintf("engine: %v", err))
	}
}

// failStep handles a failed forward pass (a bug or a dead device): the batch is dropped and its
// sequences fail; the engine keeps serving. A batch planned after it (pipelined) is undone by the
// scheduler's Discard: its decodes are of sequences in b, and its other chunks (requests admitted or
// prompts continued in it) go back to the scheduler unharmed, to run in a later step.
func (e *Engine) failStep(err error, b *scheduler.Batch) {
	e.log.Error("forward pass failed", "err", err, "tokens", b.NumTokens, "sequences", len(b.Chunks))
	if derr := e.sched.Discard(b); derr != nil { // drops the later batch too
		panic(fmt.Sprintf("engine: %v", derr))
	}
	for _, c := range b.Chunks {
		if r := e.live[c.Seq.ID()]; r != nil {
			if ferr := e.sched.Finish(r.seq, scheduler.FinishError); ferr != nil {
				panic(fmt.Sprintf("engine: %v", ferr))
			}
			e.finish(r, FinishError, fmt.Errorf("engine: request %s: %w", r.req.ID, err), Output{Text: r.rest()})
		}
	}
	if errors.Is(err, model.ErrDeviceLost) {
		e.fail(err)
	}
}

// fail stops the engine for good: its model can run nothing any more (model.ErrDeviceLost). Every live
// request finishes with the error now, and every later one at once (admit, Add); Err and Failed tell
// the server, which stops serving. The loop goes on only to answer requests until Close.
func (e *Engine) fail(cause error) {
	e.failMu.Lock()
	if e.failErr != nil {
		e.failMu.Unlock()
		return
	}
	e.failErr = fmt.Errorf("%w: %w", ErrFailed, cause)
	close(e.failed)
	e.failMu.Unlock()
	e.log.Error("the model can run nothing any more: failing every request; restart the process", "err", cause)
	for _, r := range e.live {
		if !r.seq.Finished() {
			if err := e.sched.Finish(r.seq, scheduler.FinishError); err != nil {
				panic(fmt.Sprintf("engine: %v", err))
			}
		}
		e.finish(r, FinishError, e.failErr, Output{Text: r.rest()})
	}
}

// apply hands a step's sampled tokens to the scheduler and streams each sequence's new token. A
// sequence whose logits were not finite (a pick of model.NonFinitePick) ends with ErrNonFiniteLogits
// first, so that Update leaves it out.
func (e *Engine) apply(b *scheduler.Batch, sampled []int32) {
	k := 0
	for _, c := range b.Chunks {
		if !c.NeedsLogits {
			continue
		}
		if sampled[k] < 0 {
			e.endNonFinite(e.live[c.Seq.ID()])
		}
		k++
	}
	updated, err := e.sched.Update(b, sampled)
	if err != nil {
		panic(fmt.Sprintf("engine: %v", err)) // only a batch the loop mishandled gets here
	}
	var prompt int64
	for _, c := range b.Prefills() {
		prompt += int64(c.Len)
	}
	e.statsMu.Lock()
	e.stats.Steps++
	e.stats.PromptTokens += prompt
	e.stats.GenerationTokens += int64(len(updated))
	e.statsMu.Unlock()
	for _, seq := range updated {
		if r := e.live[seq.ID()]; r != nil {
			e.postprocess(r)
		}
	}
}

// endNonFinite ends r (nil: already finished) with ErrNonFiniteLogits: its logits held NaN or +Inf, so
// no token can be drawn for it. Its text so far goes out with the error; the other requests go on.
func (e *Engine) endNonFinite(r *request) {
	if r == nil {
		return
	}
	if err := e.sched.Finish(r.seq, scheduler.FinishError); err != nil {
		panic(fmt.Sprintf("engine: %v", err)) // a live request's sequence is unfinished
	}
	e.statsMu.Lock()
	e.stats.NonFiniteLogits++
	e.statsMu.Unlock()
	e.finish(r, FinishError, fmt.Errorf("engine: request %s: %w", r.req.ID, ErrNonFiniteLogits), Output{Text: r.rest()})
}

// pickParams says whether the model can pick b's tokens on its device (PickModel) and with which
// parameters: nil when every sequence that needs a token is greedy, unconstrained and draws on the
// device, else one draw per logits row when all of them draw on the device (not drawsOnHost), and no
// prompt rows. The masks of constrained rows are the caller's to fill in (fillMasks).
func (e *Engine) pickParams(b *scheduler.Batch) (PickModel, []model.SampleParams, bool) {
	pm, ok := e.model.(PickModel)
	if !ok || hasPromptRows(b) {
		return nil, nil, false
	}
	if e.allGreedy(b) {
		return pm, nil, true
	}
	params, ok := e.deviceSampling(b)
	return pm, params, ok
}

// forwardOnHost runs the model on st, brings the logits to the host and draws one token per logits row
// of b with each request's sampler. Prompt rows of requests that want prompt logprobs (promptRows)
// get their logits too, after b's own rows, and their log-probabilities go to the requests.
func (e *Engine) forwardOnHost(b *scheduler.Batch, st *model.Step) ([]int32, error) {
	prompt := e.promptRows(b)
	if len(prompt) > 0 {
		rows := slices.Grow(slices.Clone(st.LogitRows), len(prompt))
		for _, p := range prompt {
			rows = append(rows, p.row)
		}
		st.LogitRows = rows
	}
	jobs := make([]sampleJob, 0, b.NumLogits)
	for _, c := range b.Chunks {
		if c.NeedsLogits {
			jobs = append(jobs, sampleJob{r: e.live[c.Seq.ID()], step: outputIndex(c)})
		}
	}
	// Constrained requests' masks are computed while the model runs the step.
	var constrained []*request
	for _, j := range jobs {
		if j.r != nil && j.r.req.Constraint != nil {
			constrained = append(constrained, j.r)
		}
	}
	masks := e.startMasks(constrained)
	logits, err := e.model.Forward(st)
	masks.Wait()
	if want := b.NumLogits + len(prompt); err == nil && len(logits) != want {
		err = fmt.Errorf("forward returned %d logit rows for %d", len(logits), want)
	}
	if err != nil {
		return nil, err
	}
	sampled := make([]int32, b.NumLogits)
	for k := range jobs {
		jobs[k].logits, jobs[k].out = logits[k], &sampled[k]
	}
	e.parallel(len(jobs), e.vocab, func(i int) { sampleOne(&jobs[i]) })
	badPrompt := make([]bool, len(prompt))
	e.parallel(len(prompt), e.vocab, func(i int) {
		p := prompt[i]
		r := p.r
		row := logits[b.NumLogits+i]
		if !model.Pickable(row) {
			badPrompt[i] = true
			return
		}
		r.prompt[p.pos+1] = computeLogprobs(row, r.seq.Tokens()[p.pos+1], r.req.PromptTopLogprobs)
	})
	for i, bad := range badPrompt {
		if bad {
			e.endNonFinite(e.live[prompt[i].r.seq.ID()]) // its prompt logprobs would be NaN
		}
	}
	return sampled, nil
}

// startMasks starts computing the masks of the constrained requests, spread over the engine's
// workers; Wait on the result before sampling.
func (e *Engine) startMasks(constrained []*request) *sync.WaitGroup {
	var wg sync.WaitGroup
	if len(constrained) == 0 {
		return &wg
	}
	workers := min(e.workers, len(constrained))
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(constrained); i += workers {
				constrained[i].computeMask()
			}
		})
	}
	return &wg
}

// computeMask sets r.mask to the tokens r's constraint allows next: its own mask, and EOS and the
// stop token ids once it is complete. (A stop token id the constraint allows mid-way, an ordinary
// token that the user made a stop, stays allowed and stops the request as usual.)
func (r *request) computeMask() {
	c := r.req.Constraint
	c.Mask(r.mask)
	if !c.Complete() {
		return
	}
	for _, id := range r.stopIDs {
		if id >= 0 && int(id)/64 < len(r.mask) {
			r.mask[id>>6] |= 1 << (id & 63)
		}
	}
}

// promptRow is a prompt position whose logits a request wants for its prompt logprobs: those of
// position pos (flat row row of the step) give the log-probability of prompt token pos+1.
type promptRow struct {
	r        *request
	pos, row int32
}

// promptRows lists the rows of b whose logits go to prompt logprobs: the prompt positions but the
// last (whose logits draw the first token) in the chunks of sequences whose prompt logits are still
// wanted (scheduler.Sequence.WantsPromptLogits: asked for, and no token yet), in chunk order.
func (e *Engine) promptRows(b *scheduler.Batch) []promptRow {
	var rows []promptRow
	for _, c := range b.Chunks {
		end := promptRowsEnd(c)
		if c.Start >= end {
			continue
		}
		r := e.live[c.Seq.ID()]
		if r == nil || r.prompt == nil { // finished since it was scheduled
			continue
		}
		for pos := c.Start; pos < end; pos++ {
			rows = append(rows, promptRow{r, int32(pos), int32(c.Offset + pos - c.Start)})
		}
	}
	return rows
}

// promptRowsEnd is the end of chunk c's prompt rows: its first position past them (c.Start when it
// has none).
func promptRowsEnd(c scheduler.Chunk) int {
	if !c.Seq.WantsPromptLogits() {
		return c.Start
	}
	return min(c.Start+c.Len, c.Seq.NumPromptTokens()-1)
}

// hasPromptRows reports whether b has a row promptRows would list, without building the list: the
// check every device step makes.
func hasPromptRows(b *scheduler.Batch) bool {
	for _, c := range b.Chunks {
		if c.Start < promptRowsEnd(c) {
			return true
		}
	}
	return false
}

// outputIndex is the index among its sequence's output tokens of the token chunk c's step draws.
func outputIndex(c scheduler.Chunk) uint64 {
	return uint64(c.Start + c.Len - c.Seq.NumPromptTokens())
}

// allGreedy reports whether every sequence of b that needs a token would take the argmax of its
// logits: greedy, unconstrained, and not drawsOnHost.
func (e *Engine) allGreedy(b *scheduler.Batch) bool {
	for _, c := range b.Chunks {
		if !c.NeedsLogits {
			continue
		}
		r := e.live[c.Seq.ID()]
		if r == nil || !r.sampler.params.greedy() || r.req.Constraint != nil || r.drawsOnHost(outputIndex(c)) {
			return false
		}
	}
	return true
}

// deviceSampling returns the model's sampling parameters for each logits row of b, in order, when
// every sequence that needs a token can be sampled on the model's device (not drawsOnHost).
// Each row's draw is named by the request's seed and the index of the output token being drawn.
func (e *Engine) deviceSampling(b *scheduler.Batch) ([]model.SampleParams, bool) {
	params := make([]model.SampleParams, 0, b.NumLogits)
	for _, c := range b.Chunks {
		if !c.NeedsLogits {
			continue
		}
		r := e.live[c.Seq.ID()]
		if r == nil || r.drawsOnHost(outputIndex(c)) {
			return nil, false
		}
		params = append(params, r.modelSampling(outputIndex(c)))
	}
	return params, len(params) == b.NumLogits
}

// drawsOnHost reports whether r's draw of output token step needs its logits on the host: penalties,
// logprobs, a logit bias, min_tokens' mask (masksStops), or a constraint's mask when the model takes
// none (hostMask), none of which the device's pick applies.
func (r *request) drawsOnHost(step uint64) bool {
	return r.sampler.hasPenalties() || r.req.Logprobs || len(r.req.Sampling.LogitBias) > 0 || r.masksStops(step) ||
		r.hostMask
}

// masksStops reports whether r's draw of output token step must not pick a stop token (EOS, ignored
// or not, and the stop token ids): min_tokens as vLLM defines it, the first MinTokens output tokens
// never one of its all_stop_token_ids. Such draws happen on the host, with those logits at −∞.
func (r *request) masksStops(step uint64) bool {
	return step < uint64(r.req.MinTokens) && len(r.minMasked) > 0
}

// modelSampling returns the model's sampling parameters for r's draw of output token step: its
// filters (none when greedy), its seed and that index.
func (r *request) modelSampling(step uint64) model.SampleParams {
	p := r.sampler.params
	sp := model.SampleParams{Seed: r.seed, Step: step}
	if !p.greedy() {
		sp.Temperature, sp.TopK, sp.TopP, sp.MinP = p.Temperature, p.TopK, p.TopP, p.MinP
	}
	return sp
}

// buildStep turns a batch into the model's step. The flat per-token slices (tokens, positions,
// slots, logit rows) are the batch's own; only the per-chunk ones are built here, in the engine's
// reused buffers.
func (e *Engine) buildStep(b *scheduler.Batch) *model.Step {
	st := &e.steps[e.flip]
	e.flip ^= 1
	st.Tokens, st.Positions, st.SlotMapping, st.LogitRows = b.TokenIDs, b.Positions, b.SlotMapping, b.LogitIndices
	st.InputFrom = b.InputFrom
	st.QueryStart = append(st.QueryStart[:0], 0)
	st.ContextLens = st.ContextLens[:0]
	clear(st.BlockTables)
	st.BlockTables = st.BlockTables[:0]
	if groups := e.pool.NumGroups(); groups > 1 && st.GroupBlockTables == nil {
		st.GroupBlockTables = make([][][]int32, groups-1)
	}
	for g := range st.GroupBlockTables {
		clear(st.GroupBlockTables[g])
		st.GroupBlockTables[g] = st.GroupBlockTables[g][:0]
	}
	for i := range b.Chunks {
		c := &b.Chunks[i]
		st.QueryStart = append(st.QueryStart, int32(c.Offset+c.Len))
		st.ContextLens = append(st.ContextLens, int32(c.ContextLen))
		st.BlockTables = append(st.BlockTables, c.BlockTable)
		for g := range st.GroupBlockTables {
			st.GroupBlockTables[g] = append(st.GroupBlockTables[g], c.BlockTables[g+1])
		}
	}
	return st
}

// sampleJob is one sequence's draw in a step.
type sampleJob struct {
	r      *request
	logits []float32
	out    *int32
	step   uint64 // the index of the output token being drawn
}

// parallelSampleWork is the number of logits (rows × vocabulary) above which a step's draws are
// spread over goroutines. Each request has its own sampler and random stream, so the result does not
// depend on how the draws are spread.
const parallelSampleWork = 1 << 17

// parallel calls work(i) for i in [0, n), spread over the engine's workers when the n rows of
// vocab logits each are worth it. Each call must touch only its own row's state.
func (e *Engine) parallel(n, vocab int, work func(i int)) {
	workers := e.workers
	if n*vocab < parallelSampleWork {
		workers = 1
	}
	fanout.Each(workers, n, work)
}

// sampleOne draws one job's token, and its logprobs when the request asked for them.
func sampleOne(j *sampleJob) {
	if j.r == nil { // cannot happen: every chunk's sequence is live; keep the batch consistent anyway
		*j.out = model.Argmax(j.logits)
		return
	}
	logits := j.logits
	if !model.Pickable(logits) { // before any bias or mask: the model's own numbers
		*j.out = model.NonFinitePick
		return
	}
	if bias := j.r.req.Sampling.LogitBias; len(bias) > 0 || j.r.masksStops(j.step) || j.r.mask != nil {
		// A copy: logprobs stay those of the model's logits (as with penalties).
		logits = slices.Clone(logits)
		for id, b := range bias {
			logits[id] += b
		}
		if j.r.mask != nil {
			model.MaskLogits(logits, j.r.mask) // as the model's masked pick does
		}
		if j.r.masksStops(j.step) {
			for _, id := range j.r.minMasked {
				if id >= 0 && int(id) < len(logits) {
					logits[id] = float32(math.Inf(-1))
				}
			}
		}
	}
	var tok int32
	if j.r.sampler.hasPenalties() {
		tok = j.r.sampler.sample(logits)
	} else {
		// The same draw as on the device (PickModel): a penalty-free request's tokens do not
		// depend on whether its step ended on the device or on the host (logprobs, a penalised
		// neighbour), up to float rounding.
		tok = model.SampleLogits(logits, j.r.modelSampling(j.step))
	}
	*j.out = tok
	if j.r.req.Logprobs {
		j.r.logprobs = computeLogprobs(j.logits, tok, j.r.req.TopLogprobs)
	}
}

// postprocess handles the token the scheduler just appended to r's sequence: penalties' counts, text,
// stop strings, streaming, and finishing.
func (e *Engine) postprocess(r *request) {
	seq := r.seq
	tok := seq.LastToken()
	r.sampler.accept(tok)
	out := Output{TokenIDs: []int32{tok}}
	if c := r.req.Constraint; c != nil && !(seq.FinishReason() == scheduler.FinishStop && slices.Contains(r.stopIDs, tok)) {
		if err := c.Accept(tok); err != nil {
			// Only a draw from logits that the mask left all −∞ (or NaN) gets here.
			if !seq.Finished() {
				if ferr := e.sched.Finish(seq, scheduler.FinishError); ferr != nil {
					panic(fmt.Sprintf("engine: %s: %v", r.req.ID, ferr))
				}
			}
			e.finish(r, FinishError, fmt.Errorf("engine: request %s: %w", r.req.ID, err), Output{TokenIDs: out.TokenIDs, Text: r.rest()})
			return
		}
		if c.Done() && !seq.Finished() {
			// Nothing may follow: the constraint ends the request, as a stop string would.
			if err := e.sched.Finish(seq, scheduler.FinishStop); err != nil {
				panic(fmt.Sprintf("engine: stop %s: %v", r.req.ID, err))
			}
		}
	}
	if r.prompt != nil {
		out.PromptLogprobs = r.promptLogprobs(e.tok)
	}
	if r.req.Logprobs {
		r.detok.peek(r.logprobs.Top) // before tok joins the detokenizer: the alternatives' context
		out.Logprobs = []Logprobs{r.logprobs}
	}

	var reason FinishReason
	switch seq.FinishReason() {
	case scheduler.FinishStop:
		reason = FinishStop
	case scheduler.FinishLength:
		reason = FinishLength
	}
	// r.held is the text not streamed yet: what could still begin a stop string (the holdBack of
	// the previous turn), then this token's text. A stop string that ends in the new text cannot
	// start in text already streamed, since holdBack kept every such beginning.
	from := len(r.held)
	// An EOS or stop token ends the text without adding its own.
	var piece string
	if !(reason == FinishStop && slices.Contains(r.stopIDs, tok)) {
		piece = r.detok.next(tok)
	}
	if reason != "" {
		piece += r.detok.flush()
	}
	r.held += piece
	if r.req.Logprobs {
		out.Logprobs[0].Text = piece
	}
	// Under min_tokens no stop string applies, and the text of the first MinTokens tokens is no
	// new text to look in (vLLM's BaseIncrementalDetokenizer.update): a stop string can match
	// from the token after them on, though it may begin in their text.
	if seq.NumOutputTokens() > r.req.MinTokens {
		if pos, stop, ok := r.stops.find(r.held, from); ok {
			if r.req.IncludeStopString {
				pos += len(stop)
			}
			r.held = r.held[:pos]
			reason, out.StopString = FinishStop, stop
			if !seq.Finished() {
				if err := e.sched.Finish(seq, scheduler.FinishStop); err != nil {
					panic(fmt.Sprintf("engine: stop %s: %v", r.req.ID, err))
				}
			}
		}
	}
	end := len(r.held)
	if reason == "" {
		end -= r.stops.holdBack(r.held)
	}
	out.Text, r.held = r.held[:end], r.held[end:]
	if reason != "" {
		e.finish(r, reason, nil, out)
		return
	}
	out.Usage = usageOf(seq)
	e.send(r, out)
}

// promptLogprobs hands over the prompt logprobs the request's prompt steps collected, with each
// entry's text (the prompt decoded piece by piece, alternatives in their context) and the first
// entry's id, once: a recompute after a preemption collects none again.
func (r *request) promptLogprobs(tok Tokenizer) []Logprobs {
	lps := r.prompt
	r.prompt = nil
	d := newDetokenizer(tok, nil, !r.req.KeepSpecialTokens)
	for i, id := range r.req.PromptIDs {
		if i > 0 {
			d.peek(lps[i].Top)
		}
		lps[i].ID = id
		lps[i].Text = d.next(id)
	}
	lps[len(lps)-1].Text += d.flush()
	return lps
}

// updateStats refreshes the snapshot Stats returns.
func (e *Engine) updateStats() {
	ps := e.pool.Stats()
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	s := &e.stats
	s.Running, s.Waiting = e.sched.NumRunning(), e.sched.NumWaiting()
	s.KVBlocksTotal, s.KVBlocksUsed, s.KVBlocksCached = ps.TotalBlocks, ps.UsedBlocks, ps.CachedBlocks
	s.KVUsage = 0
	if ps.TotalBlocks > 0 {
		s.KVUsage = float64(ps.UsedBlocks) / float64(ps.TotalBlocks)
	}
	s.PrefixQueriedTokens, s.PrefixHitTokens, s.PrefixHitRate = ps.QueriedTokens, ps.HitTokens, ps.HitRate()
	s.Preemptions = e.sched.NumPreemptions()
}
