package openai

import (
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
}

type tokenizeResponse struct {
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
	Tokens      []int32 `json:"tokens"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if !s.readRequest(w, r, &req) {
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
		ids = s.tok.Encode(*req.Prompt, add)
	case req.Messages != nil:
		text, aerr := s.renderChat(&chatRequest{Messages: req.Messages, AddGenerationPrompt: req.AddGenerationPrompt,
			ChatTemplateKwargs: req.ChatTemplateKwargs})
		if aerr != nil {
			s.fail(w, aerr)
			return
		}
		add := false // the template wrote the special tokens
		if req.AddSpecialTokens != nil {
			add = *req.AddSpecialTokens
		}
		ids = s.tok.Encode(text, add)
	default:
		s.fail(w, badRequest("prompt", "Give 'prompt' or 'messages'."))
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: s.eng.MaxModelLen(), Tokens: ids})
}

// detokenizeRequest is the body of POST /detokenize.
type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if !s.readRequest(w, r, &req) {
		return
	}
	if req.Tokens == nil {
		s.fail(w, badRequest("tokens", "'tokens' is required."))
		return
	}
	if s.cfg.VocabSize > 0 {
		for i, t := range req.Tokens {
			if t < 0 || int(t) >= s.cfg.VocabSize {
				s.fail(w, badRequest("tokens", "Token %d at index %d is outside the vocabulary of %d.", t, i, s.cfg.VocabSize))
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Prompt string `json:"prompt"`
	}{s.tok.Decode(req.Tokens, false)})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
