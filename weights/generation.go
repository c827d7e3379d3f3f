package weights

import (
	"errors"
	"fmt"
	"io/fs"
)

// GenerationConfig holds a model's sampling defaults from generation_config.json. A nil pointer or an
// empty slice means the file does not set the value (or there is no file).
type GenerationConfig struct {
	BOSTokenIDs, EOSTokenIDs []int32  // bos_token_id, eos_token_id (one id or a list)
	Temperature              *float64 // temperature, >= 0
	TopP                     *float64 // top_p, in [0, 1]
	MinP                     *float64 // min_p, in [0, 1]
	RepetitionPenalty        *float64 // repetition_penalty, > 0
	TopK                     *int     // top_k, >= 0
	MaxNewTokens             *int     // max_new_tokens: the output cap
	// MaxLength bounds prompt plus completion, as transformers' max_length does.
	MaxLength *int
	DoSample  *bool // do_sample (ignored by the engine, as by vLLM)
}

// ParseGenerationConfig parses and validates the contents of a generation_config.json.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	f, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("generation config: %w: %w", ErrInvalid, err)
	}
	g := &GenerationConfig{}
	if err := g.parse(f); err != nil {
		return nil, fmt.Errorf("generation config: %w", err)
	}
	return g, nil
}

// LoadGenerationConfig reads the generation_config.json at path. A missing file gives the zero
// GenerationConfig and no error.
func LoadGenerationConfig(path string) (*GenerationConfig, error) {
	data, err := ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &GenerationConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	g, err := ParseGenerationConfig(data)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	return g, nil
}

func (g *GenerationConfig) parse(f fields) error {
	var err error
	if g.BOSTokenIDs, _, err = f.tokenIDs("bos_token_id"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if g.EOSTokenIDs, _, err = f.tokenIDs("eos_token_id"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	floats := []struct {
		key      string
		dst      **float64
		min, max float64
		minOpen  bool
	}{
		{"temperature", &g.Temperature, 0, 1e308, false},
		{"top_p", &g.TopP, 0, 1, false},
		{"min_p", &g.MinP, 0, 1, false},
		{"repetition_penalty", &g.RepetitionPenalty, 0, 1e308, true},
	}
	for _, p := range floats {
		v, ok, err := f.float(p.key)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			continue
		}
		if v < p.min || v > p.max || (p.minOpen && v == p.min) {
			return invalid(p.key, "%g out of range", v)
		}
		*p.dst = &v
	}
	ints := []struct {
		key string
		dst **int
	}{{"top_k", &g.TopK}, {"max_new_tokens", &g.MaxNewTokens}, {"max_length", &g.MaxLength}}
	for _, p := range ints {
		v, ok, err := f.int(p.key)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			continue
		}
		if v < 0 {
			return invalid(p.key, "%d is negative", v)
		}
		*p.dst = &v
	}
	v, ok, err := f.bool("do_sample")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if ok {
		g.DoSample = &v
	}
	return nil
}
