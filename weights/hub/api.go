package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Files gollm reads from a model folder, fetched when the repository has them. The weights are
// chosen as package weights opens them: model.safetensors when present, otherwise
// model.safetensors.index.json and exactly the shards its weight_map names. Nothing else is fetched:
// no .bin, .gguf, .pt, .msgpack, ONNX or other formats, no subfolders.
const (
	configFile      = "config.json"
	tokenizerFile   = "tokenizer.json"
	safetensorsFile = "model.safetensors"
	indexFile       = "model.safetensors.index.json"
)

// optionalFiles are fetched when present.
var optionalFiles = []string{
	"generation_config.json",
	"tokenizer_config.json",
	"special_tokens_map.json",
	"chat_template.jinja",
	"chat_template.json",
}

// ErrNotLoadable is wrapped by Pull's error when the repository lacks what gollm needs to load a
// model (config.json, tokenizer.json, safetensors weights), before anything is downloaded.
var ErrNotLoadable = errors.New("not a model gollm can load")

// modelInfo is the part of the hub's model info (GET /api/models/ORG/NAME/revision/REV?blobs=true)
// that Pull reads.
type modelInfo struct {
	SHA      string    `json:"sha"`      // the commit the revision names
	Gated    any       `json:"gated"`    // false, or "auto" / "manual" for a gated model
	Siblings []sibling `json:"siblings"` // the files at that commit
}

// sibling is one file of the repository.
type sibling struct {
	Name string `json:"rfilename"`
	Size *int64 `json:"size"` // present with ?blobs=true
	LFS  *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"` // present for Git LFS files with ?blobs=true
}

// gated reports whether the model info marks the model as gated.
func (m *modelInfo) gated() bool {
	switch g := m.Gated.(type) {
	case bool:
		return g
	case string:
		return g != "" && g != "false"
	}
	return false
}

// parseModelInfo reads and checks the model info's JSON: a commit hash and a list of files.
func parseModelInfo(data []byte) (*modelInfo, error) {
	var m modelInfo
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("model info: %w", err)
	}
	if !isCommit(m.SHA) {
		return nil, fmt.Errorf("model info: sha %q is not a commit hash", m.SHA)
	}
	if m.Siblings == nil {
		return nil, errors.New("model info: no siblings (the list of files)")
	}
	for _, s := range m.Siblings {
		if s.Name == "" {
			return nil, errors.New("model info: a sibling without rfilename")
		}
		if s.LFS != nil && !isSHA256(s.LFS.SHA256) {
			return nil, fmt.Errorf("model info: %s: lfs sha256 %q is not a sha256", s.Name, s.LFS.SHA256)
		}
	}
	return &m, nil
}

// file returns the sibling named name.
func (m *modelInfo) file(name string) (sibling, bool) {
	i := slices.IndexFunc(m.Siblings, func(s sibling) bool { return s.Name == name })
	if i < 0 {
		return sibling{}, false
	}
	return m.Siblings[i], true
}

// plan returns the files to fetch, and whether the weights are sharded, so that the index must be
// read for the rest (its shards are added by shardsOf).
func (m *modelInfo) plan() (files []string, sharded bool, err error) {
	var missing []string
	for _, f := range []string{configFile, tokenizerFile} {
		if _, ok := m.file(f); ok {
			files = append(files, f)
		} else {
			missing = append(missing, f)
		}
	}
	switch _, single := m.file(safetensorsFile); {
	case single:
		files = append(files, safetensorsFile)
	default:
		if _, ok := m.file(indexFile); ok {
			files = append(files, indexFile)
			sharded = true
		} else {
			missing = append(missing, safetensorsFile+" or "+indexFile)
		}
	}
	if len(missing) > 0 {
		var have []string
		for _, s := range m.Siblings {
			have = append(have, s.Name)
		}
		return nil, false, fmt.Errorf("%w: it has no %s (it has %s)", ErrNotLoadable, strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	for _, f := range optionalFiles {
		if _, ok := m.file(f); ok {
			files = append(files, f)
		}
	}
	return files, sharded, nil
}

// shardsOf reads a model.safetensors.index.json and returns the distinct shard files its weight_map
// names, sorted; each must be a plain file name that the repository has.
func (m *modelInfo) shardsOf(index []byte) ([]string, error) {
	shards, err := parseIndexShards(index)
	if err != nil {
		return nil, err
	}
	for _, s := range shards {
		if _, ok := m.file(s); !ok {
			return nil, fmt.Errorf("%s names shard %s, which the repository does not have", indexFile, s)
		}
	}
	return shards, nil
}

// parseIndexShards returns the distinct values of an index's weight_map, sorted.
func parseIndexShards(index []byte) ([]string, error) {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", indexFile, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: empty or missing weight_map", indexFile)
	}
	var shards []string
	for tensor, s := range idx.WeightMap {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00") || !strings.HasSuffix(s, ".safetensors") {
			return nil, fmt.Errorf("%s: tensor %q: shard %q is not a .safetensors file name", indexFile, tensor, s)
		}
		if !slices.Contains(shards, s) {
			shards = append(shards, s)
		}
	}
	slices.Sort(shards)
	return shards, nil
}

// isSHA256 reports whether s is a hex sha256, as the hub gives for LFS files.
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
