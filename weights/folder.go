package weights

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// File names in a HuggingFace model folder.
const (
	ConfigFile           = "config.json"
	GenerationConfigFile = "generation_config.json"
	TokenizerConfigFile  = "tokenizer_config.json"
	ChatTemplateFile     = "chat_template.jinja"
	TokenizerFile        = "tokenizer.json"
)

// Folder is an opened HuggingFace model folder: its validated configuration and its memory-mapped
// weights. Generation and TokenizerConfig are never nil (zero values when their files are absent).
type Folder struct {
	Dir             string            // the folder Open was given
	Config          *Config           // config.json
	Generation      *GenerationConfig // generation_config.json
	TokenizerConfig *TokenizerConfig  // tokenizer_config.json (and chat_template.jinja)
	Tensors         *TensorSet        // the safetensors weights, checked against Config
}

// Open reads the model folder dir: config.json (required), generation_config.json and
// tokenizer_config.json (optional; a chat_template.jinja beside them replaces the chat template, as
// in transformers), and the safetensors weights, which must pass CheckTensors (for a multimodal folder,
// the text model's tensors, in whichever of transformers' layouts the checkpoint uses). When config.json
// names no dtype, Config.DType is taken from the embeddings. The caller must Close the folder.
func Open(dir string) (*Folder, error) {
	cfg, err := LoadConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	gen, err := LoadGenerationConfig(filepath.Join(dir, GenerationConfigFile))
	if err != nil {
		return nil, err
	}
	tok, err := LoadTokenizerConfig(filepath.Join(dir, TokenizerConfigFile))
	if err != nil {
		return nil, err
	}
	template, err := ReadFile(filepath.Join(dir, ChatTemplateFile))
	switch {
	case err == nil:
		tok.ChatTemplate = string(template)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("weights: %w", err)
	}
	tensors, err := OpenSafetensors(dir)
	if err != nil {
		return nil, err
	}
	cfg.resolveTextPrefix(tensors)
	if err := CheckTensors(cfg, tensors); err != nil {
		tensors.Close()
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	if !cfg.dtypeGiven {
		cfg.DType = tensors.tensors[cfg.Tensor("embed_tokens.weight")].entry.DType
	}
	return &Folder{Dir: dir, Config: cfg, Generation: gen, TokenizerConfig: tok, Tensors: tensors}, nil
}

// Close releases the folder's weights.
func (f *Folder) Close() error { return f.Tensors.Close() }

// TokenizerPath returns the path of the folder's tokenizer.json.
func (f *Folder) TokenizerPath() string { return filepath.Join(f.Dir, TokenizerFile) }
