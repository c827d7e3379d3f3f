package openai

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gollm/gollm/engine"
)

// Response objects, with OpenAI's field names; fields OpenAI sends as null are pointers without
// omitempty.

// completionLogprobs is a completion choice's "logprobs". With echo it covers the prompt's tokens,
// then the generated ones; the prompt's first token has no probability, so its token_logprobs and
// top_logprobs entries are null (a nil pointer, a nil map).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float32           `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	// PromptLogprobs is vLLM's prompt_logprobs, sent when the request asks for them (vLLM sends
	// null otherwise; leaving it out keeps OpenAI's shape).
	PromptLogprobs []promptPosition `json:"prompt_logprobs,omitempty"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type chatTokenLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatLogprob struct {
	chatTokenLogprob
	TopLogprobs []chatTokenLogprob `json:"top_logprobs"`
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
}

// chatMessageOut is a response's message: content is null when the model made tool calls and said
// nothing else.
type chatMessageOut struct {
	Role      string        `json:"role"`
	Content   *string       `json:"content"`
	ToolCalls []toolCallOut `json:"tool_calls,omitempty"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     *chatLogprobs  `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
	// PromptLogprobs is vLLM's prompt_logprobs, of the one prompt all choices share: at the top
	// level, as in vLLM's ChatCompletionResponse.
	PromptLogprobs []promptPosition `json:"prompt_logprobs,omitempty"`
}

type chatDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	// Usage is null in every chunk but the last when stream_options.include_usage is set.
	Usage *usage `json:"usage"`
	// withUsage says whether to send the usage field at all.
	withUsage bool
}

// MarshalJSON leaves "usage" out unless the client asked for it, as OpenAI does.
func (c chatChunk) MarshalJSON() ([]byte, error) {
	type plain chatChunk
	if c.withUsage {
		return jsonMarshal(plain(c))
	}
	return jsonMarshal(struct {
		plain
		Usage *usage `json:"usage,omitempty"`
	}{plain: plain(c)})
}

type completionChunk struct {
	completionResponse
	withUsage bool
}

// MarshalJSON sends "usage": null in intermediate chunks when the client asked for usage.
func (c completionChunk) MarshalJSON() ([]byte, error) {
	if c.withUsage {
		return jsonMarshal(struct {
			completionResponse
			Usage *usage `json:"usage"`
		}{c.completionResponse, c.Usage})
	}
	return jsonMarshal(c.completionResponse)
}

// minLogprob is the floor of the logprobs the API returns: vLLM's, which turns -Inf (a token the
// model rules out, as a prompt token may be) into a number JSON can carry.
const minLogprob = -9999

// clampLogprob applies minLogprob.
func clampLogprob(lp float32) float32 { return max(lp, minLogprob) }

// promptLogprob is one token of a prompt position in vLLM's prompt_logprobs (its Logprob, whose
// JSON has all three fields).
type promptLogprob struct {
	Logprob      float32 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// promptToken is a token of a prompt position and its promptLogprob.
type promptToken struct {
	ID int32
	promptLogprob
}

// promptPosition is one entry of prompt_logprobs: a JSON object keyed by token id (as a string),
// holding the prompt's token, then its alternatives best first, each token once, in vLLM's order
// (its dict puts the prompt token first). nil is JSON null, the prompt's first position.
type promptPosition []promptToken

// MarshalJSON writes the object with its keys in order.
func (p promptPosition) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	b := []byte{'{'}
	for i, t := range p {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(t.ID), 10)
		b = append(b, '"', ':')
		v, err := jsonMarshal(t.promptLogprob)
		if err != nil {
			return nil, err
		}
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// promptLogprobsOf turns the engine's prompt logprobs into prompt_logprobs: null for the first
// token, which nothing scores; then, for each other token, the token with its logprob and rank, and
// its alternatives, ranked 1, 2... by their order (as vLLM ranks them), all with the -9999 floor. The
// prompt's token keeps its own entry when it is also an alternative (its rank is then the same). A
// decoded_token is the engine's text: for the prompt's token its piece of the decoded prompt
// (special tokens empty unless skip_special_tokens is false; see appendPrompt), for an alternative
// the text it would have added there. nil in, nil out.
func promptLogprobsOf(lps []engine.Logprobs) []promptPosition {
	if lps == nil {
		return nil
	}
	out := make([]promptPosition, len(lps))
	for i, lp := range lps {
		if i == 0 {
			continue
		}
		pos := make(promptPosition, 0, len(lp.Top)+1)
		pos = append(pos, promptToken{ID: lp.ID, promptLogprob: promptLogprob{Logprob: clampLogprob(lp.Logprob), Rank: lp.Rank, DecodedToken: lp.Text}})
		for r, t := range lp.Top {
			if t.ID != lp.ID {
				pos = append(pos, promptToken{ID: t.ID, promptLogprob: promptLogprob{Logprob: clampLogprob(t.Logprob), Rank: r + 1, DecodedToken: t.Text}})
			}
		}
		out[i] = pos
	}
	return out
}

// newCompletionLogprobs returns empty lists (not nulls), to which the append methods add tokens.
func newCompletionLogprobs() *completionLogprobs {
	return &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
}

// appendTokens appends the entries of engine logprobs lps, the first of them at text offset offset,
// and returns the offset after the last. Each top_logprobs map holds the token itself and its first
// maxTop alternatives, keyed by text (logprobs=N gives N+1 entries at most, as in OpenAI's API and
// vLLM; logprobs=0 the token alone). With firstUnscored, the first entry is the prompt's first token,
// which no earlier token scores: its logprob and top_logprobs are null, as in vLLM.
//
// Offsets are byte offsets into the choice's text: each token's offset is the previous one's plus
// the length of the previous token's text, as vLLM computes them (vLLM counts characters, not
// bytes: the two agree on ASCII text).
func (c *completionLogprobs) appendTokens(lps []engine.Logprobs, offset int, firstUnscored bool, maxTop int) int {
	for i, lp := range lps {
		tok := lp.Text
		c.Tokens = append(c.Tokens, tok)
		c.TextOffset = append(c.TextOffset, offset)
		offset += len(tok)
		if i == 0 && firstUnscored {
			c.TokenLogprobs = append(c.TokenLogprobs, nil)
			c.TopLogprobs = append(c.TopLogprobs, nil)
			continue
		}
		v := clampLogprob(lp.Logprob)
		c.TokenLogprobs = append(c.TokenLogprobs, &v)
		alts := lp.Top[:min(len(lp.Top), max(maxTop, 0))]
		top := make(map[string]float32, len(alts)+1)
		top[tok] = v
		for _, t := range alts {
			top[t.Text] = clampLogprob(t.Logprob)
		}
		c.TopLogprobs = append(c.TopLogprobs, top)
	}
	return offset
}

// appendPrompt appends a prompt's logprobs (engine.Output.PromptLogprobs), whose texts spell the
// decoded prompt, at offsets from 0, each with at most maxTop alternatives (the request's logprobs:
// prompt_logprobs may have asked the engine for more, which vLLM's echo also cuts to logprobs+1
// entries); it returns the offset after them.
//
// Differences from vLLM, deliberate: vLLM decodes each prompt token on its own (so a BOS token shows
// as "<s>", and a tokenizer's word-start marker may vanish), so its prompt tokens need not spell the
// echoed text and its offsets drift from it; here the engine's pieces spell the decoded prompt
// (special tokens empty unless skip_special_tokens is false), which is what echo with logprobs
// echoes (handleCompletions), so the offsets index the choice's text.
func (c *completionLogprobs) appendPrompt(lps []engine.Logprobs, maxTop int) int {
	return c.appendTokens(lps, 0, true, maxTop)
}

func bytesOf(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

func chatLogprobsOf(lps []engine.Logprobs) *chatLogprobs {
	out := &chatLogprobs{Content: []chatLogprob{}}
	for _, lp := range lps {
		tok := lp.Text
		c := chatLogprob{chatTokenLogprob: chatTokenLogprob{Token: tok, Logprob: clampLogprob(lp.Logprob), Bytes: bytesOf(tok)},
			TopLogprobs: []chatTokenLogprob{}}
		for _, t := range lp.Top {
			c.TopLogprobs = append(c.TopLogprobs, chatTokenLogprob{Token: t.Text, Logprob: clampLogprob(t.Logprob), Bytes: bytesOf(t.Text)})
		}
		out.Content = append(out.Content, c)
	}
	return out
}

// handleCompletions serves POST /v1/completions.
//
// echo puts each prompt's text before its choices' text. With logprobs as well, the engine also
// scores the prompt (engine.Request.PromptLogprobs) and each choice's logprobs cover the prompt's
// tokens, then the generated ones, as in vLLM (serving_completion.py): the prompt's first entry is
// null. The generated tokens' text offsets continue after the echoed text, in a stream too: vLLM's
// continue after its prompt tokens' decoded lengths (the same where those spell the echoed text, see
// appendPrompt), and in a stream its chunks after the first restart them after the generated text
// alone, leaving the prompt out (its previous_text_lens), which misplaces them in the choice's text.
// echo with max_tokens 0 returns the prompt alone (lm-eval-harness' loglikelihood requests
// send max_tokens 1 and drop the last token themselves; max_tokens 0 asks the server to): like vLLM,
// the engine still generates one token, which the response leaves out but its usage counts.
//
// vLLM's prompt_logprobs=K gives each choice its prompt's "prompt_logprobs" (see promptLogprobsOf),
// not in a stream (which accepts only K = 0, as vLLM's, and ignores it). With echo and logprobs, K
// (when given) also sets the engine's alternatives per prompt token, as in vLLM, though the echoed
// top_logprobs maps still hold at most logprobs of them.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !s.readRequest(w, r, &req) {
		return
	}
	if req.Suffix != nil && *req.Suffix != "" {
		s.fail(w, badRequest("suffix", "'suffix' is not supported."))
		return
	}
	maxTokens := req.MaxTokens
	// promptOnly: echo with max_tokens 0 runs one token and returns none (vLLM's
	// echo_without_generation).
	promptOnly := req.Echo && maxTokens != nil && *maxTokens == 0
	if promptOnly {
		one := 1
		maxTokens = &one
	} else if maxTokens != nil && *maxTokens == 0 {
		s.fail(w, badRequest("max_tokens", "'max_tokens' 0 must be at least 1 (0 is allowed only with 'echo', to return the prompt alone)."))
		return
	}
	base, n, aerr := req.common(&s.cfg, maxTokens, "max_tokens")
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	bestOf, aerr := req.bestOf(&s.cfg, n, req.Stream)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	grammar, aerr := s.requestConstraint(&req.constraintFields, nil)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > DefaultMaxLogprobs {
			s.fail(w, badRequest("logprobs", "'logprobs' %d must lie in [0, %d].", *req.Logprobs, DefaultMaxLogprobs))
			return
		}
		base.Logprobs, base.TopLogprobs = true, *req.Logprobs
		if req.Echo {
			// As vLLM: echo's prompt logprobs have prompt_logprobs alternatives when it is given
			// (common set those), else logprobs.
			base.PromptLogprobs = true
			if req.PromptLogprobs == nil {
				base.PromptTopLogprobs = *req.Logprobs
			}
		}
	}
	// echoLogprobs: every choice shows its prompt's logprobs in its logprobs. Otherwise only
	// prompt_logprobs asks for them, which the first choice of each prompt computes for all (the
	// others then may reuse its prompt's cached blocks).
	echoLogprobs := req.Echo && base.Logprobs
	withPromptLogprobs := req.wantPromptLogprobs()
	texts, ids, aerr := parsePrompt(req.Prompt)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	if ids != nil && s.cfg.VocabSize > 0 {
		for p, promptIDs := range ids {
			for i, t := range promptIDs {
				if t < 0 || int(t) >= s.cfg.VocabSize {
					s.fail(w, badRequest("prompt", "Token %d at index %d of prompt %d is outside the vocabulary of %d.", t, i, p, s.cfg.VocabSize))
					return
				}
			}
		}
	}
	if ids == nil {
		split, aerr := s.splitSpecial(req.SplitSpecialTokens)
		if aerr != nil {
			s.fail(w, aerr)
			return
		}
		for _, t := range texts {
			ids = append(ids, s.encodePrompt(t, s.cfg.AddSpecialTokens, split))
		}
	}
	if len(ids)*bestOf > s.cfg.MaxSequences {
		s.fail(w, badRequest("prompt", "%d prompts × %d choices need %d sequences; at most %d are allowed per request.", len(ids), bestOf, len(ids)*bestOf, s.cfg.MaxSequences))
		return
	}
	promptLens := make([]int, len(ids))
	var jobs []*job
	for p, promptIDs := range ids {
		promptLens[p] = len(promptIDs)
		if len(promptIDs) == 0 {
			s.fail(w, badRequest("prompt", "Prompt %d is empty after tokenization.", p))
			return
		}
		if aerr := s.checkContext(len(promptIDs), base.MaxTokens, "prompt"); aerr != nil {
			s.fail(w, aerr)
			return
		}
		for c := range bestOf {
			rq := base
			rq.PromptIDs = promptIDs
			rq.Logprobs = base.Logprobs || bestOf > n // the ranking reads each token's
			if rq.MaxTokens == 0 {
				rq.MaxTokens = s.defaultMaxTokens(DefaultCompletionTokens, len(promptIDs))
			}
			if aerr := checkMinTokens(rq.MinTokens, rq.MaxTokens); aerr != nil {
				s.fail(w, aerr)
				return
			}
			rq.Sampling = seeded(base.Sampling, c)
			rq.PromptLogprobs = base.PromptLogprobs && (echoLogprobs || c == 0)
			if grammar != nil {
				rq.Constraint = grammar.NewMatcher() // one per choice
			}
			jobs = append(jobs, &job{choice: p*bestOf + c, prompt: p, req: rq})
		}
	}
	// The echo is the prompt string as sent, or the decoded prompt: for token ids, and with logprobs,
	// whose prompt tokens are the decoded prompt's pieces, so that the tokens spell the choice's text
	// and every text_offset indexes it (the string as sent may differ: a kept BOS, special-token
	// text in it, a normalisation). vLLM echoes the string and lets the offsets drift from it.
	echo := make([]string, len(ids))
	if req.Echo {
		for p := range ids {
			if texts != nil && !base.Logprobs {
				echo[p] = texts[p]
			} else {
				echo[p] = s.tok.Decode(ids[p], !base.KeepSpecialTokens)
			}
		}
	}

	ctx, cancel := s.requestContext(r)
	defer cancel()
	ru, aerr := s.startRun(ctx, jobs)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	defer ru.close()
	for p := range promptLens {
		s.metrics.promptTokens.Add(float64(promptLens[p] * bestOf))
	}
	id, created := newID("cmpl-"), time.Now().Unix()
	head := completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.ModelName}

	if !req.Stream {
		outs, aerr := ru.collectAll(r.Context(), len(jobs))
		if aerr != nil || outs == nil {
			if aerr != nil {
				s.fail(w, aerr)
			}
			return
		}
		resp := head
		u := totalUsage(promptLens, outs) // every choice generated, best_of's too
		resp.Usage = &u
		if bestOf > n {
			outs = bestChoices(outs, bestOf, n, withPromptLogprobs && !echoLogprobs)
		}
		var promptLPs []promptPosition // of the current prompt
		for i, o := range outs {
			p := i / n
			text, lps := string(o.text), o.logprobs
			if promptOnly {
				text, lps = "", nil
			}
			ch := completionChoice{Index: i, Text: echo[p] + text, FinishReason: finishReason(o.reason)}
			if base.Logprobs {
				ch.Logprobs = newCompletionLogprobs()
				if req.Echo {
					ch.Logprobs.appendPrompt(o.promptLogprobs, base.TopLogprobs)
				}
				ch.Logprobs.appendTokens(lps, len(echo[p]), false, base.TopLogprobs)
			}
			if withPromptLogprobs {
				if i%n == 0 { // the prompt's first choice, which computed them
					promptLPs = promptLogprobsOf(o.promptLogprobs)
				}
				ch.PromptLogprobs = promptLPs
			}
			resp.Choices = append(resp.Choices, ch)
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}

	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	out := s.newSSE(w)
	// offsets[c] is the text offset of choice c's next token; echoed[c] says whether its first
	// chunk, which carries the echoed prompt, has been sent.
	offsets := make([]int, len(jobs))
	echoed := make([]bool, len(jobs))
	var usageChunk func(u *usage) any
	if includeUsage {
		usageChunk = func(u *usage) any {
			chunk := completionChunk{completionResponse: head, withUsage: true}
			chunk.Choices = []completionChoice{}
			chunk.Usage = u
			return chunk
		}
	}
	ru.stream(out, len(jobs), promptLens, func(j *job, o engine.Output) []any {
		c := j.choice
		text, lps := o.Text, o.Logprobs
		if promptOnly {
			text, lps = "", nil
		}
		ch := completionChoice{Index: c, FinishReason: finishReason(o.FinishReason)}
		if base.Logprobs {
			ch.Logprobs = newCompletionLogprobs()
		}
		// As in vLLM, a choice's first chunk carries the echoed prompt (and its logprobs) together
		// with the first generated text: it goes with the output that brings the first token (which
		// carries the prompt's logprobs), or with the last if none does.
		if req.Echo && !echoed[c] && (len(o.TokenIDs) > 0 || o.Finished()) {
			echoed[c] = true
			ch.Text = echo[j.prompt]
			if ch.Logprobs != nil {
				ch.Logprobs.appendPrompt(o.PromptLogprobs, base.TopLogprobs)
			}
			offsets[c] = len(echo[j.prompt])
		} else if text == "" && len(lps) == 0 && !o.Finished() {
			return nil
		}
		ch.Text += text
		if ch.Logprobs != nil {
			offsets[c] = ch.Logprobs.appendTokens(lps, offsets[c], false, base.TopLogprobs)
		}
		chunk := completionChunk{completionResponse: head, withUsage: includeUsage}
		chunk.Choices = []completionChoice{ch}
		return []any{chunk}
	}, usageChunk)
}

// bestChoices keeps, of each prompt's bestOf outcomes (a prompt's together, in choice order), the n of
// highest mean log-probability per generated token, best first, ties to the earlier choice: the
// completions API's best_of. With promptLogprobs the prompt's logprobs, which its first choice
// computed, go to the first one kept.
func bestChoices(outs []outcome, bestOf, n int, promptLogprobs bool) []outcome {
	kept := make([]outcome, 0, len(outs)/bestOf*n)
	for p := 0; p+bestOf <= len(outs); p += bestOf {
		group := outs[p : p+bestOf]
		order := make([]int, bestOf)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			return cmp.Compare(meanLogprob(group[b].logprobs), meanLogprob(group[a].logprobs))
		})
		first := len(kept)
		for _, i := range order[:n] {
			kept = append(kept, group[i])
		}
		if promptLogprobs {
			kept[first].promptLogprobs = group[0].promptLogprobs
		}
	}
	return kept
}

// meanLogprob is the mean log-probability of a choice's tokens, −Inf for a choice of none.
func meanLogprob(lps []engine.Logprobs) float64 {
	if len(lps) == 0 {
		return math.Inf(-1)
	}
	var sum float64
	for _, lp := range lps {
		sum += float64(lp.Logprob)
	}
	return sum / float64(len(lps))
}

// seeded gives choice c of a seeded request its own seed (seed + c), so that n > 1 choices differ
// while the whole response stays reproducible.
func seeded(p engine.SamplingParams, c int) engine.SamplingParams {
	if p.Seed != nil && c > 0 {
		seed := *p.Seed + uint64(c)
		p.Seed = &seed
	}
	return p
}

// handleChat serves POST /v1/chat/completions. vLLM's prompt_logprobs=K puts the rendered
// conversation's "prompt_logprobs" at the top level of the response (see promptLogprobsOf), as
// vLLM's does; not in a stream (which accepts only K = 0, as vLLM's, and ignores it). Tool use is
// tools.go's, structured output structured.go's.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !s.readRequest(w, r, &req) {
		return
	}
	tu, aerr := s.toolUse(&req)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	maxTokens, param := req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		maxTokens, param = req.MaxCompletionTokens, "max_completion_tokens"
	}
	base, n, aerr := req.common(&s.cfg, maxTokens, param)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	if req.BestOf != nil && *req.BestOf != n {
		s.fail(w, badRequest("best_of", "'best_of' other than n is supported by /v1/completions only."))
		return
	}
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > DefaultMaxLogprobs {
			s.fail(w, badRequest("top_logprobs", "'top_logprobs' %d must lie in [0, %d].", *req.TopLogprobs, DefaultMaxLogprobs))
			return
		}
		// 0 without logprobs asks for nothing: vLLM accepts it (its check_logprobs refuses only a
		// positive top_logprobs without logprobs).
		if *req.TopLogprobs > 0 && !req.Logprobs {
			s.fail(w, badRequest("top_logprobs", "'top_logprobs' needs 'logprobs': true."))
			return
		}
		base.TopLogprobs = *req.TopLogprobs
	}
	base.Logprobs = req.Logprobs
	split, aerr := s.splitSpecial(req.SplitSpecialTokens)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	// The template writes the special tokens itself (bos_token), so none are added here.
	promptIDs, aerr := s.chatPrompt(&req, false, split)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	grammar, aerr := s.requestConstraint(&req.constraintFields, tu)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	if tu.forced >= 0 {
		promptIDs = append(promptIDs, tu.forced)
	}
	if tu.parser == ToolParserHermes || tu.parser == ToolParserMistral {
		// Their tags may be special tokens, whose text the output must keep to be parsed (vLLM's
		// parsers turn skip_special_tokens off too).
		base.KeepSpecialTokens = true
	}
	if len(promptIDs) == 0 {
		s.fail(w, badRequest("messages", "The rendered conversation is empty."))
		return
	}
	if aerr := s.checkContext(len(promptIDs), base.MaxTokens, "messages"); aerr != nil {
		s.fail(w, aerr)
		return
	}
	maxGen := base.MaxTokens
	if maxGen == 0 {
		maxGen = s.defaultMaxTokens(0, len(promptIDs))
		if s.cfg.MaxTokensLimit > 0 { // else the engine's 0: as many as the context allows
			base.MaxTokens = maxGen
		}
	}
	if aerr := checkMinTokens(base.MinTokens, maxGen); aerr != nil {
		s.fail(w, aerr)
		return
	}
	jobs := make([]*job, n)
	for c := range n {
		rq := base
		rq.PromptIDs = promptIDs
		rq.Sampling = seeded(base.Sampling, c)
		// The first choice computes prompt_logprobs for all: the others may then reuse its
		// prompt's cached blocks.
		rq.PromptLogprobs = base.PromptLogprobs && c == 0
		if grammar != nil {
			rq.Constraint = grammar.NewMatcher() // one per choice
		}
		jobs[c] = &job{choice: c, req: rq}
	}

	ctx, cancel := s.requestContext(r)
	defer cancel()
	ru, aerr := s.startRun(ctx, jobs)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	defer ru.close()
	s.metrics.promptTokens.Add(float64(len(promptIDs) * n))
	id, created := newID("chatcmpl-"), time.Now().Unix()
	promptLens := []int{len(promptIDs)}

	if !req.Stream {
		outs, aerr := ru.collectAll(r.Context(), n)
		if aerr != nil || outs == nil {
			if aerr != nil {
				s.fail(w, aerr)
			}
			return
		}
		resp := chatResponse{ID: id, Object: "chat.completion", Created: created, Model: s.cfg.ModelName,
			Usage: totalUsage(promptLens, outs)}
		if req.wantPromptLogprobs() {
			resp.PromptLogprobs = promptLogprobsOf(outs[0].promptLogprobs)
		}
		for i, o := range outs {
			text := string(o.text)
			ch := chatChoice{Index: i, Message: chatMessageOut{Role: "assistant", Content: &text},
				FinishReason: finishReason(o.reason)}
			if tu.parser != "" {
				to := newToolOutput(tu)
				to.apply(to.parser.feed(text))
				to.apply(to.parser.finish())
				ch.Message = to.message()
				ch.FinishReason = to.finishReason(o.reason)
			}
			if base.Logprobs {
				ch.Logprobs = chatLogprobsOf(o.logprobs)
			}
			resp.Choices = append(resp.Choices, ch)
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}

	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	chunk := func(choices ...chatChunkChoice) chatChunk {
		return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.cfg.ModelName,
			Choices: choices, withUsage: includeUsage}
	}
	out := s.newSSE(w)
	empty := ""
	for c := range n {
		out.send(chunk(chatChunkChoice{Index: c, Delta: chatDelta{Role: "assistant", Content: &empty}}))
	}
	var usageChunk func(u *usage) any
	if includeUsage {
		usageChunk = func(u *usage) any {
			last := chunk()
			last.Choices = []chatChunkChoice{}
			last.Usage = u
			return last
		}
	}
	var touts []*toolOutput
	if tu.parser != "" {
		touts = make([]*toolOutput, n)
		for c := range touts {
			touts[c] = newToolOutput(tu)
		}
	}
	ru.stream(out, n, promptLens, func(j *job, o engine.Output) []any {
		if touts != nil {
			return toolChunks(touts[j.choice], j.choice, o, base.Logprobs, chunk)
		}
		return plainChunks(j.choice, o, base.Logprobs, chunk)
	}, usageChunk)
}

// plainChunks turns one engine output of a choice whose output is not parsed into stream chunks: its
// text and logprobs, if it brings any, with a null finish_reason; then, once the output is finished, a
// chunk of its own with an empty delta and the finish reason, as OpenAI ends a streamed choice (a
// client may stop reading a choice at its finish_reason).
func plainChunks(choice int, o engine.Output, logprobs bool, chunk func(...chatChunkChoice) chatChunk) []any {
	var chunks []any
	if o.Text != "" || logprobs && len(o.Logprobs) > 0 {
		ch := chatChunkChoice{Index: choice}
		if o.Text != "" {
			text := o.Text
			ch.Delta.Content = &text
		}
		if logprobs && len(o.Logprobs) > 0 {
			ch.Logprobs = chatLogprobsOf(o.Logprobs)
		}
		chunks = append(chunks, chunk(ch))
	}
	if o.Finished() {
		chunks = append(chunks, chunk(chatChunkChoice{Index: choice, FinishReason: finishReason(o.FinishReason)}))
	}
	return chunks
}

// toolChunks turns one engine output of a choice whose calls are parsed into stream chunks: its
// content, then one chunk per tool-call delta (a call's first, with its id, type, name and empty
// arguments; then the pieces of its arguments), the output's logprobs on the first of them (or on a
// chunk of their own), and, once the output is finished, a last chunk with the finish reason.
func toolChunks(to *toolOutput, choice int, o engine.Output, logprobs bool, chunk func(...chatChunkChoice) chatChunk) []any {
	events := to.parser.feed(o.Text)
	if o.Finished() {
		events = append(events, to.parser.finish()...)
	}
	content, deltas := to.apply(events)
	var choices []chatChunkChoice
	if content != "" {
		choices = append(choices, chatChunkChoice{Index: choice, Delta: chatDelta{Content: &content}})
	}
	for _, d := range deltas {
		choices = append(choices, chatChunkChoice{Index: choice, Delta: chatDelta{ToolCalls: []toolCallDelta{d}}})
	}
	if logprobs && len(o.Logprobs) > 0 {
		if len(choices) == 0 {
			choices = append(choices, chatChunkChoice{Index: choice})
		}
		choices[0].Logprobs = chatLogprobsOf(o.Logprobs)
	}
	if o.Finished() {
		choices = append(choices, chatChunkChoice{Index: choice, FinishReason: to.finishReason(o.FinishReason)})
	}
	chunks := make([]any, len(choices))
	for i, c := range choices {
		chunks[i] = chunk(c)
	}
	return chunks
}

func (s *Server) String() string { return fmt.Sprintf("server(%s)", s.cfg.ModelName) }
