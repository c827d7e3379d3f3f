package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/gollm/gollm/engine"
)

// job is one sequence of a request: one choice of one prompt.
type job struct {
	choice int // the choice's index in the response
	prompt int // the prompt's index
	req    engine.Request
}

// event is one engine output of one job, or its failure.
type event struct {
	job *job
	out engine.Output
	err error
}

// run is one HTTP request's set of engine sequences in flight.
type run struct {
	s      *Server
	start  time.Time
	events chan event
	// pending counts the jobs whose final event has not been read yet.
	pending int
	// first and last token times per choice, for latency metrics.
	firstAt, lastAt map[int]time.Time
	// abort cancels every job (a client that stopped reading); their final outputs still arrive.
	abort context.CancelFunc
}

// newID returns an OpenAI-style id with the given prefix.
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// contextExceeded marks e with OpenAI's code for a request past the context, context_length_exceeded,
// which clients branch on to shorten a conversation.
func contextExceeded(e *apiError) *apiError {
	e.Code = strPtr("context_length_exceeded")
	return e
}

// checkContext rejects a prompt that leaves no room in the context, or a max_tokens that does not
// fit after it (as OpenAI and vLLM do), before any work.
func (s *Server) checkContext(promptLen, maxTokens int, param string) *apiError {
	limit := s.eng.MaxModelLen()
	if promptLen >= limit {
		return contextExceeded(badRequest(param, "This model's maximum context length is %d tokens. However, your prompt has %d tokens, which leaves no room to generate.", limit, promptLen))
	}
	if maxTokens > 0 && maxTokens > limit-promptLen { // not promptLen+maxTokens: a huge max_tokens would wrap
		total := promptLen + maxTokens
		if total < 0 {
			total = math.MaxInt
		}
		return contextExceeded(badRequest(param, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the prompt or max_tokens.",
			limit, total, promptLen, maxTokens))
	}
	return nil
}

// startRun admits and adds every job to the engine and starts reading their streams. On error
// nothing is left running. The returned run's events end when ctx does or every job finished.
func (s *Server) startRun(ctx context.Context, jobs []*job) (*run, *apiError) {
	if err := s.admit(len(jobs)); err != nil {
		return nil, err
	}
	ru := &run{s: s, start: time.Now(), events: make(chan event, len(jobs)), pending: len(jobs),
		firstAt: map[int]time.Time{}, lastAt: map[int]time.Time{}}
	addCtx, cancelAdds := context.WithCancel(ctx)
	streams := make([]Stream, len(jobs))
	for i, j := range jobs {
		st, err := s.eng.Add(addCtx, j.req)
		if err != nil {
			cancelAdds() // abort the jobs already added
			s.release(len(jobs) - i)
			for k := range i {
				go s.drain(ctx, streams[k]) // their final (abort) outputs release their room
			}
			return nil, s.engineError(err)
		}
		streams[i] = st
	}
	context.AfterFunc(ctx, cancelAdds)
	ru.abort = cancelAdds
	for i, j := range jobs {
		go func() {
			defer s.release(1)
			for {
				o, err := streams[i].Recv(context.Background())
				if errors.Is(err, io.EOF) {
					// The engine promises a finished output before EOF; should a stream end without
					// one, fail the job rather than wait for it forever.
					err = fmt.Errorf("stream ended without a finished output: %w", io.ErrUnexpectedEOF)
				}
				ru.events <- event{job: j, out: o, err: err}
				if err != nil || o.Finished() {
					return
				}
			}
		}()
	}
	return ru, nil
}

// drain reads a stream to its end (its request was aborted) and releases its room.
func (s *Server) drain(ctx context.Context, st Stream) {
	defer s.release(1)
	for {
		if _, err := st.Recv(context.Background()); err != nil {
			return
		}
	}
}

// engineError maps an error of Engine.Add to an API error.
func (s *Server) engineError(err error) *apiError {
	switch {
	case errors.Is(err, engine.ErrPromptTooLong):
		return badRequest("", "%v", err)
	case errors.Is(err, engine.ErrInvalidRequest):
		return badRequest("", "%v", err)
	case errors.Is(err, engine.ErrClosed):
		s.engineDown.Store(true)
		return shuttingDown()
	case errors.Is(err, engine.ErrFailed):
		s.engineDown.Store(true)
		return &apiError{status: http.StatusServiceUnavailable, Message: fmt.Sprintf("The engine has failed and cannot serve: %v", err),
			Type: "server_error", Code: strPtr("engine_failed")}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if s.abortCtx.Err() != nil { // the shutdown's deadline, not the client: someone is there to answer
			return shuttingDown()
		}
		return &apiError{status: 499, Message: "client closed the request", Type: "invalid_request_error"}
	}
	return internalError("engine: %v", err)
}

// close aborts whatever still runs and reads the remaining events, so that no reader goroutine is
// left behind and every job's admission is released. Handlers defer it right after startRun: it
// costs nothing once every event was read, and it cleans up after a panic too.
func (ru *run) close() {
	ru.abort()
	for {
		if _, ok := ru.next(); !ok {
			return
		}
	}
}

// next returns the next event, false once every job has finished. Handlers must call it until it
// returns false (after ru.abort if they give up), or defer close, so that no reader goroutine is
// left behind.
func (ru *run) next() (event, bool) {
	if ru.pending == 0 {
		return event{}, false
	}
	ev := <-ru.events
	if ev.err != nil || ev.out.Finished() {
		ru.pending--
	}
	ru.observe(ev)
	if h := ru.s.eventHook; h != nil {
		h(ev)
	}
	return ev, true
}

// observe records latency and token metrics for one event.
func (ru *run) observe(ev event) {
	if ev.err != nil {
		return
	}
	m := ru.s.metrics
	now := time.Now()
	c := ev.job.choice
	if n := len(ev.out.TokenIDs); n > 0 {
		if _, ok := ru.firstAt[c]; !ok {
			ru.firstAt[c] = now
			m.ttft.Observe(now.Sub(ru.start).Seconds())
			n--
		} else if n > 0 {
			gap := now.Sub(ru.lastAt[c]).Seconds() / float64(n)
			for range n {
				m.interToken.Observe(gap)
			}
		}
		ru.lastAt[c] = now
	}
	if ev.out.Finished() {
		m.e2e.Observe(now.Sub(ru.start).Seconds())
		m.generationTokens.Add(float64(ev.out.Usage.CompletionTokens))
		m.requestsFinished.WithLabelValues(string(ev.out.FinishReason)).Inc()
	}
}

// finishReason maps the engine's reason to OpenAI's.
func finishReason(r engine.FinishReason) *string {
	if r == "" {
		return nil
	}
	s := string(r)
	return &s
}

// sse writes Server-Sent Events, extending the write deadline before each one.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	failed  bool
}

func (s *Server) newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	e := &sse{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	w.WriteHeader(http.StatusOK)
	e.rc.Flush()
	return e
}

// send writes one "data: {json}" event. A value that cannot be encoded (a bug: a NaN, say) is not
// sent; send returns its error, and the caller ends the stream with an error event.
func (e *sse) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	e.write("data: " + string(data) + "\n\n")
	return nil
}

// done writes the final "data: [DONE]" event.
func (e *sse) done() { e.write("data: [DONE]\n\n") }

func (e *sse) write(s string) {
	if e.failed {
		return
	}
	e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	if _, err := io.WriteString(e.w, s); err != nil {
		e.failed = true
		return
	}
	if err := e.rc.Flush(); err != nil {
		e.failed = true
	}
}

// sendError writes an error event in the middle of a stream (vLLM's convention).
func (e *sse) sendError(err *apiError) {
	e.send(struct { //nolint:errcheck // an apiError always encodes
		Error *apiError `json:"error"`
	}{err})
}

// usage is OpenAI's usage object.
type usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

// promptTokensDetails is usage's breakdown of the prompt tokens.
type promptTokensDetails struct {
	// CachedTokens are the prompt tokens whose KV came from the prefix cache instead of being computed.
	CachedTokens int `json:"cached_tokens"`
}

// outcome accumulates one choice's result.
type outcome struct {
	text     []byte
	ids      []int32
	logprobs []engine.Logprobs
	// promptLogprobs are the prompt's, when the request asked for them.
	promptLogprobs []engine.Logprobs
	reason         engine.FinishReason
	usage          engine.Usage
}

// failure turns an event's error or FinishError into an API error.
func failure(ev event) *apiError {
	if ev.err != nil {
		return internalError("engine stream: %v", ev.err)
	}
	if ev.out.FinishReason == engine.FinishError {
		switch {
		case errors.Is(ev.out.Err, engine.ErrPromptTooLong):
			return badRequest("", "%v", ev.out.Err)
		case errors.Is(ev.out.Err, engine.ErrNonFiniteLogits):
			e := internalError("generation failed: %v (the model's weights or its numbers are broken; the server's logs and gollm:non_finite_logits_total count these)", ev.out.Err)
			e.Code = strPtr("non_finite_logits")
			return e
		}
		return internalError("generation failed: %v", ev.out.Err)
	}
	return nil
}

// collectAll reads every event into per-choice outcomes (non-streaming responses). It returns
// nil outcomes when the client went away (client is the request's own context: when the server aborts
// the run at the end of a shutdown, the outcomes come back, finished with "abort"). The first failure
// aborts the other choices (the response is that failure: they would only hold their KV pages until it
// is sent).
func (ru *run) collectAll(client context.Context, choices int) ([]outcome, *apiError) {
	out := make([]outcome, choices)
	var firstErr *apiError
	for {
		ev, ok := ru.next()
		if !ok {
			break
		}
		if err := failure(ev); err != nil && firstErr == nil {
			firstErr = err
			ru.abort()
		}
		if ev.err != nil {
			continue
		}
		o := &out[ev.job.choice]
		o.text = append(o.text, ev.out.Text...)
		o.ids = append(o.ids, ev.out.TokenIDs...)
		o.logprobs = append(o.logprobs, ev.out.Logprobs...)
		if o.promptLogprobs == nil {
			o.promptLogprobs = ev.out.PromptLogprobs
		}
		if ev.out.Finished() {
			o.reason, o.usage = ev.out.FinishReason, ev.out.Usage
		}
	}
	if client.Err() != nil {
		return nil, nil
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// stream drives a streaming response over choices choices to its end. It stops the run when the
// client stops reading; answers the first failure with an error event and stops the run, sending no
// other chunk after it (the other choices' aborts included, as vLLM's stream ends at its error);
// records each choice's final usage; and sends, for every other output, the chunks that chunk builds
// for it (none, for an output that brings nothing to show). Unless a failure was sent, it then
// sends usageChunk's chunk of the total usage (when usageChunk is not nil), and always ends the
// stream with [DONE].
func (ru *run) stream(out *sse, choices int, promptLens []int, chunk func(j *job, o engine.Output) []any,
	usageChunk func(u *usage) any) {
	finals := make([]outcome, choices)
	var streamErr *apiError
	for {
		ev, ok := ru.next()
		if !ok {
			break
		}
		if out.failed {
			ru.abort()
			continue
		}
		if streamErr != nil {
			continue // the error event ended the stream; the rest only drains
		}
		if aerr := failure(ev); aerr != nil {
			streamErr = aerr
			out.sendError(aerr)
			ru.abort()
			continue
		}
		o := ev.out
		if o.Finished() {
			finals[ev.job.choice].usage = o.Usage
		}
		for _, c := range chunk(ev.job, o) {
			if err := out.send(c); err != nil {
				streamErr = internalError("cannot encode a chunk: %v", err)
				out.sendError(streamErr)
				ru.abort()
				break
			}
		}
	}
	if streamErr == nil && usageChunk != nil {
		u := totalUsage(promptLens, finals)
		out.send(usageChunk(&u))
	}
	out.done()
}

// totalUsage sums usage: each prompt's tokens once, every choice's completion tokens. outs holds the
// same number of choices for each prompt, a prompt's together; the cached tokens of a prompt are
// those of its first choice, counted once as its tokens are (the other choices may find the first
// one's blocks in the prefix cache, but the prompt is billed once).
func totalUsage(promptLens []int, outs []outcome) usage {
	u := usage{}
	for _, n := range promptLens {
		u.PromptTokens += n
	}
	if len(promptLens) > 0 {
		perPrompt := len(outs) / len(promptLens)
		for p := range promptLens {
			if i := p * perPrompt; i < len(outs) {
				u.PromptTokensDetails.CachedTokens += outs[i].usage.CachedTokens
			}
		}
	}
	for _, o := range outs {
		u.CompletionTokens += o.usage.CompletionTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// clientGone reports whether the error means the client went away (nobody to answer).
func (e *apiError) clientGone() bool { return e.status == 499 }

func (s *Server) fail(w http.ResponseWriter, e *apiError) {
	if e.clientGone() {
		return
	}
	if e.status >= 500 {
		s.log.Error("request failed", "status", e.status, "error", e.Message)
	}
	writeError(w, e)
}
