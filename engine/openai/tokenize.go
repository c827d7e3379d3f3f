package openai

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// tokenizeRequest is the body of POST /tokenize (vLLM's): a prompt, or chat messages rendered with
// the chat template.
type tokenizeRequest struct {
	Model               string         `json:"model"`
	Prompt              *string        `json:"prompt"`
	AddSpecialTokens    *bool          `json:"add_special_tokens"`
	Messages            []chatMessage  `json:"messages"`
	AddGenerationPrompt *bool          `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs"`
	SplitSpecialTokens  *bool          `json:"split_special_tokens"`
}

type tokenizeResponse struct {
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
	Tokens      []int32 `json:"tokens"`
}

// handleTokenize serves POST /tokenize. It counts as one sequence against the server's admission
// limit while it works (429 beyond, as generation), and a prompt of more tokens than the context is
// refused as generation refuses it (400, naming the count): its work and its answer stay bounded.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if !s.readRequest(w, r, &req) {
		return
	}
	if aerr := s.admit(1); aerr != nil {
		s.fail(w, aerr)
		return
	}
	defer s.release(1)
	split, aerr := s.splitSpecial(req.SplitSpecialTokens)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	var ids []int32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		s.fail(w, badRequest("", "Give either 'prompt' or 'messages', not both."))
		return
	case req.Prompt != nil:
		add := s.cfg.AddSpecialTokens
		if req.AddSpecialTokens != nil {
			add = *req.AddSpecialTokens
		}
		ids = s.encodePrompt(*req.Prompt, add, split)
	case req.Messages != nil:
		add := false // the template wrote the special tokens
		if req.AddSpecialTokens != nil {
			add = *req.AddSpecialTokens
		}
		var aerr *apiError
		ids, aerr = s.chatPrompt(&chatRequest{Messages: req.Messages, AddGenerationPrompt: req.AddGenerationPrompt,
			ChatTemplateKwargs: req.ChatTemplateKwargs}, add, split)
		if aerr != nil {
			s.fail(w, aerr)
			return
		}
	default:
		s.fail(w, badRequest("prompt", "Give 'prompt' or 'messages'."))
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	if limit := s.eng.MaxModelLen(); len(ids) > limit {
		param := "prompt"
		if req.Messages != nil {
			param = "messages"
		}
		s.fail(w, contextExceeded(badRequest(param, "This model's maximum context length is %d tokens. However, your prompt has %d tokens.", limit, len(ids))))
		return
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: s.eng.MaxModelLen(), Tokens: ids})
}

// detokenizeRequest is the body of POST /detokenize.
type detokenizeRequest struct {
	Model  string    `json:"model"`
	Tokens tokenList `json:"tokens"`
}

// tokenList is a JSON list of token ids whose length is checked before it is decoded: a body of the
// largest size can list about two million ids, which decoded and detokenized cost some fifty times the
// body's memory. Set limit before decoding into it.
type tokenList struct {
	limit int     // the most ids decoded
	ids   []int32 // nil when the field is absent or null
	count int     // ids listed, when more than limit (ids is nil then)
}

// UnmarshalJSON counts the list's ids (its separators) and decodes them when they are no more than
// limit.
func (l *tokenList) UnmarshalJSON(data []byte) error {
	l.ids, l.count = nil, 0
	if string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	if n := bytes.Count(data, []byte{','}) + 1; n > l.limit {
		l.count = n
		return nil
	}
	if err := json.Unmarshal(data, &l.ids); err != nil {
		return err
	}
	if l.ids == nil {
		l.ids = []int32{}
	}
	return nil
}

// handleDetokenize serves POST /detokenize. Like /tokenize it counts as one sequence against the
// admission limit, and it decodes at most a context's worth of ids (400 beyond, before the list is
// even decoded), so that its work and its answer stay bounded.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	req := detokenizeRequest{Tokens: tokenList{limit: s.eng.MaxModelLen()}}
	if !s.readRequest(w, r, &req) {
		return
	}
	tokens := req.Tokens.ids
	switch {
	case req.Tokens.count > 0:
		s.fail(w, badRequest("tokens", "'tokens' lists %d ids, more than the %d of this model's context.", req.Tokens.count, req.Tokens.limit))
		return
	case tokens == nil:
		s.fail(w, badRequest("tokens", "'tokens' is required."))
		return
	}
	if aerr := s.admit(1); aerr != nil {
		s.fail(w, aerr)
		return
	}
	defer s.release(1)
	if s.cfg.VocabSize > 0 {
		for i, t := range tokens {
			if t < 0 || int(t) >= s.cfg.VocabSize {
				s.fail(w, badRequest("tokens", "Token %d at index %d is outside the vocabulary of %d.", t, i, s.cfg.VocabSize))
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Prompt string `json:"prompt"`
	}{s.tok.Decode(tokens, false)})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
