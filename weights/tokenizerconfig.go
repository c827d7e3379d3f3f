package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
)

// TokenizerConfig holds what the server needs from tokenizer_config.json: the special tokens by name,
// whether BOS/EOS are added, and the chat template. A nil pointer or empty string means the file does
// not set the value (or there is no file).
type TokenizerConfig struct {
	BOSToken, EOSToken, PadToken string // the special tokens' text (bos_token, eos_token, pad_token)
	AddBOSToken, AddEOSToken     *bool  // add_bos_token, add_eos_token
	// ChatTemplate is the template to render chats with: the file's string, or the entry named
	// "default" when the file holds a list of named templates (empty when no entry has that name, as
	// transformers then refuses to pick one). A chat_template.jinja beside the file replaces it when
	// read through Open.
	ChatTemplate string
	// ChatTemplates holds every named template when the file holds a list; nil otherwise.
	ChatTemplates map[string]string
	// ModelMaxLength is the longest input the tokenizer was configured for; 0 when absent or when the
	// file holds transformers' "no limit" sentinel (about 1e30, beyond int).
	ModelMaxLength int
}

// ParseTokenizerConfig parses the contents of a tokenizer_config.json.
func ParseTokenizerConfig(data []byte) (*TokenizerConfig, error) {
	f, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer config: %w: %w", ErrInvalid, err)
	}
	t := &TokenizerConfig{}
	if err := t.parse(f); err != nil {
		return nil, fmt.Errorf("tokenizer config: %w", err)
	}
	return t, nil
}

// LoadTokenizerConfig reads the tokenizer_config.json at path. A missing file gives the zero
// TokenizerConfig and no error.
func LoadTokenizerConfig(path string) (*TokenizerConfig, error) {
	data, err := ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &TokenizerConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	t, err := ParseTokenizerConfig(data)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	return t, nil
}

func (t *TokenizerConfig) parse(f fields) error {
	for _, p := range []struct {
		key string
		dst *string
	}{{"bos_token", &t.BOSToken}, {"eos_token", &t.EOSToken}, {"pad_token", &t.PadToken}} {
		s, err := parseTokenString(f, p.key)
		if err != nil {
			return err
		}
		*p.dst = s
	}
	for _, p := range []struct {
		key string
		dst **bool
	}{{"add_bos_token", &t.AddBOSToken}, {"add_eos_token", &t.AddEOSToken}} {
		v, ok, err := f.bool(p.key)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if ok {
			*p.dst = &v
		}
	}
	if err := t.parseChatTemplate(f); err != nil {
		return err
	}
	if f.has("model_max_length") {
		n, err := parseModelMaxLength(f["model_max_length"])
		if err != nil {
			return invalid("model_max_length", "%v", err)
		}
		t.ModelMaxLength = n
	}
	return nil
}

// parseTokenString reads a special token written as a string or as an AddedToken object
// {"content": ...}.
func parseTokenString(f fields, key string) (string, error) {
	if !f.has(key) {
		return "", nil
	}
	raw := bytes.TrimSpace(f[key])
	if bytes.HasPrefix(raw, []byte("{")) {
		var tok struct {
			Content *string `json:"content"`
		}
		if err := json.Unmarshal(raw, &tok); err != nil || tok.Content == nil {
			return "", invalid(key, "want a string or an object with a string content, got %s", abbreviate(raw))
		}
		return *tok.Content, nil
	}
	s, _, err := f.string(key)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return s, nil
}

func (t *TokenizerConfig) parseChatTemplate(f fields) error {
	if !f.has("chat_template") {
		return nil
	}
	raw := bytes.TrimSpace(f["chat_template"])
	if !bytes.HasPrefix(raw, []byte("[")) {
		s, _, err := f.string("chat_template")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		t.ChatTemplate = s
		return nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return invalid("chat_template", "want a string or a list of {name, template}: %v", err)
	}
	t.ChatTemplates = make(map[string]string, len(list))
	for i, e := range list {
		if e.Name == nil || e.Template == nil {
			return invalid("chat_template", "entry %d lacks a name or a template", i)
		}
		if _, dup := t.ChatTemplates[*e.Name]; dup {
			return invalid("chat_template", "duplicate template name %q", *e.Name)
		}
		t.ChatTemplates[*e.Name] = *e.Template
	}
	t.ChatTemplate = t.ChatTemplates["default"]
	return nil
}

// parseModelMaxLength reads an integer that may exceed int64 (transformers writes int(1e30) for "no
// limit"); values beyond int become 0.
func parseModelMaxLength(raw json.RawMessage) (int, error) {
	n, err := jsonNumber(raw)
	if err != nil {
		return 0, err
	}
	v, ok := new(big.Float).SetString(string(n))
	if !ok {
		return 0, fmt.Errorf("want a number, got %s", n)
	}
	if v.Sign() < 0 {
		return 0, fmt.Errorf("%s is negative", n)
	}
	if !v.IsInt() {
		return 0, fmt.Errorf("want an integer, got %s", n)
	}
	i, acc := v.Int64()
	if acc != big.Exact || int64(int(i)) != i {
		return 0, nil
	}
	return int(i), nil
}
