package llm

import (
	"net/http"

	"github.com/gollm/gollm/engine/openai"
)

// NewServer returns the OpenAI-compatible API over m. cfg holds the server's own settings (an API
// key, limits, timeouts, a logger, a tool-call parser); NewServer fills in what describes the model:
// the chat template (when cfg.ChatTemplate is nil), the special tokens, the sampling defaults, the
// vocabulary size, the constraint vocabulary (Vocabulary, when cfg.Vocabulary is nil) and the
// engine's MaxNumSeqs (when cfg.MaxRunning is 0), and the model's name when cfg.ModelName is empty.
// Completion prompts are encoded with the tokenizer's special tokens (BOS).
func (m *Model) NewServer(cfg openai.Config) (*openai.Server, error) {
	tc := m.folder.TokenizerConfig
	if cfg.Vocabulary == nil {
		v, err := m.Vocabulary()
		if err != nil {
			return nil, err
		}
		cfg.Vocabulary = v
	}
	if cfg.ModelName == "" {
		cfg.ModelName = m.name
	}
	if cfg.ChatTemplate == nil {
		cfg.ChatTemplate = m.template
	}
	cfg.BOSToken, cfg.EOSToken, cfg.PadToken = tc.BOSToken, tc.EOSToken, tc.PadToken
	cfg.AddSpecialTokens = true
	cfg.Sampling = m.sampling
	cfg.VocabSize = m.folder.Config.VocabSize
	if cfg.MaxRunning == 0 {
		cfg.MaxRunning = m.maxNumSeqs
	}
	return openai.New(openai.FromEngine(m.engine), m.tok, cfg)
}

// Handler returns the OpenAI-compatible API over m (see NewServer for cfg) as an http.Handler that
// answers /v1/completions, /v1/chat/completions, /v1/models, /tokenize, /detokenize, /health and
// /metrics; mount it on a mux at "/" (or under a prefix with http.StripPrefix). The caller's
// http.Server owns the connections: set its timeouts, and shut it down before closing m.
func (m *Model) Handler(cfg openai.Config) (http.Handler, error) {
	srv, err := m.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	return srv.Handler(), nil
}
