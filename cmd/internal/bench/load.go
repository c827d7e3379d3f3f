package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/tokenizer"
)

// ModelSpec says which model a benchmark runs and where.
type ModelSpec struct {
	// Config is a built-in shape (see PresetNames) or the path of a config.json; its weights are
	// random. Exactly one of Config and Dir is set.
	Config string
	// Dir is a model folder. Its weights are loaded unless RandomWeights is set, in which case only
	// its config.json (and tokenizer.json, when present) is read.
	Dir string
	// RandomWeights draws the parameters with model.LoadRandom instead of reading them.
	RandomWeights bool
	// Seed seeds the random weights.
	Seed uint64
	// Device is "cpu" (the default when empty) or "cuda".
	Device string
	// NumBlocks and BlockSize size the KV cache: NumBlocks pages for each KV group of the model (one
	// group without sliding windows; model.KVLayout), so that the pool holds what BlocksFor computes a
	// run needs whatever the model's groups.
	NumBlocks, BlockSize int
	// Progress is told the weights' loading progress in bytes (model.Options.Progress); nil for none.
	Progress func(loaded, total int64)
	// Quantization and KVCacheDType are model.Options': "fp8" runs the layers' matrices as FP8
	// products (random weights quantized at load) and stores the KV pages in e4m3.
	Quantization, KVCacheDType string
	// SharedPrefix is model.Options.SharedPrefix: "" (auto), "off" or "always".
	SharedPrefix string
	// TensorParallel is model.Options.TensorParallel: the ranks the model is sharded over (0 or 1:
	// whole).
	TensorParallel int
}

// Model is what the drivers need from a loaded model: the engine's view of it, and Close.
// *model.Model satisfies it.
type Model interface {
	engine.Model
	Close() error
}

// LoadedModel is a model ready to benchmark, with the facts the reports need.
type LoadedModel struct {
	// Name is the preset name or the model folder.
	Name string
	// Config is the model's shape.
	Config *weights.Config
	// Model is the loaded model (a *model.Model from LoadModel); Close frees it.
	Model Model
	// Tokenizer is the folder's tokenizer, or a stand-in that spells each id (for shapes without one).
	Tokenizer engine.Tokenizer
	// EOSTokenIDs are generation_config.json's end-of-sequence ids, if a folder gave them.
	EOSTokenIDs []int32
	// Device is where the model runs, and Precision what its backend stores.
	Device    Device
	Precision Precision
	// RankConfig, for a model sharded over GPUs (ModelSpec.TensorParallel > 1 on CUDA), is the shape of
	// the rank with the most intermediate features (model.TPRankConfig): what one GPU reads and
	// computes, which the rooflines count against one GPU's bandwidth and FLOP rate. Nil otherwise (the
	// ranks of a CPU model share the host's memory and cores: the whole Config is the bound).
	RankConfig *weights.Config
	// RandomWeights reports whether the parameters are random.
	RandomWeights bool
	// LoadTime is how long LoadModel took.
	LoadTime time.Duration

	folder *weights.Folder
}

// BlocksFor is the number of KV pages that seqs sequences of up to tokens tokens each need, plus one
// page of slack per sequence.
func BlocksFor(seqs, tokens, blockSize int) int {
	if blockSize <= 0 {
		blockSize = model.DefaultBlockSize
	}
	return seqs * ((tokens+blockSize-1)/blockSize + 1)
}

// ResolveConfig returns the shape a spec names and a name for reports, without loading weights.
func ResolveConfig(spec ModelSpec) (*weights.Config, string, error) {
	switch {
	case (spec.Config == "") == (spec.Dir == ""):
		return nil, "", fmt.Errorf("bench: give exactly one of a config (%s) and a model folder: %w",
			strings.Join(PresetNames(), ", "), ErrInvalidOptions)
	case spec.Dir != "":
		cfg, err := weights.LoadConfig(filepath.Join(spec.Dir, weights.ConfigFile))
		return cfg, spec.Dir, err
	}
	if cfg, err := Preset(spec.Config); err == nil {
		return cfg, spec.Config, nil
	}
	if _, err := os.Stat(spec.Config); err == nil {
		cfg, err := weights.LoadConfig(spec.Config)
		if err != nil {
			return nil, "", err
		}
		return cfg, strings.TrimSuffix(filepath.Base(spec.Config), ".json"), nil
	}
	return nil, "", fmt.Errorf("bench: config %q is neither built in (%s) nor a config.json file: %w",
		spec.Config, strings.Join(PresetNames(), ", "), ErrUnknownPreset)
}

// LoadModel loads the model spec names onto its device.
func LoadModel(spec ModelSpec) (*LoadedModel, error) {
	start := time.Now()
	devName := spec.Device
	if devName == "" {
		devName = "cpu"
	}
	dev, err := DeviceByName(devName)
	if err != nil {
		return nil, err
	}
	cfg, name, err := ResolveConfig(spec)
	if err != nil {
		return nil, err
	}
	opts := model.Options{NumBlocks: spec.NumBlocks * len(model.KVLayoutOf(cfg).Windows), BlockSize: spec.BlockSize,
		Progress: spec.Progress, Device: dev.Name, Quantization: spec.Quantization, KVCacheDType: spec.KVCacheDType,
		SharedPrefix: spec.SharedPrefix, TensorParallel: spec.TensorParallel}
	lm := &LoadedModel{Name: name, Device: dev, RandomWeights: spec.Config != "" || spec.RandomWeights}
	if lm.RandomWeights {
		lm.Config = cfg
		lm.Tokenizer = idTokenizer{}
		if spec.Dir != "" {
			if tok, err := tokenizer.Load(filepath.Join(spec.Dir, weights.TokenizerFile)); err == nil {
				lm.Tokenizer = tok
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("bench: %w", err)
			}
		}
		m, err := model.LoadRandom(cfg, spec.Seed, opts, nil)
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", name, err)
		}
		lm.Model = m
	} else {
		f, err := weights.Open(spec.Dir)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		tok, err := tokenizer.Load(f.TokenizerPath())
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("bench: %w", err)
		}
		m, err := model.Load(f, opts)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("bench: %s: %w", name, err)
		}
		lm.Model = m
		lm.Config, lm.Tokenizer, lm.folder = f.Config, tok, f
		lm.EOSTokenIDs = f.Generation.EOSTokenIDs
	}
	if spec.TensorParallel > 1 && dev.Name == model.DeviceCUDA {
		for r := range spec.TensorParallel {
			rc, err := model.TPRankConfig(lm.Config, spec.TensorParallel, r)
			if err != nil {
				lm.Model.Close()
				return nil, fmt.Errorf("bench: %s: %w", name, err)
			}
			if lm.RankConfig == nil || rc.IntermediateSize > lm.RankConfig.IntermediateSize {
				lm.RankConfig = rc
			}
		}
	}
	lm.Precision = dev.Precision(lm.Config)
	if model.UsesFP8Weights(lm.Config, spec.Quantization) {
		lm.Precision.LayerWeightBytes = 1
	}
	lm.Precision.KVBytes = model.KVElementBytes(spec.KVCacheDType, lm.Precision.KVBytes)
	lm.LoadTime = time.Since(start)
	return lm, nil
}

// rooflineConfig is the shape a roofline of one device counts: RankConfig, else Config.
func (lm *LoadedModel) rooflineConfig() *weights.Config {
	if lm.RankConfig != nil {
		return lm.RankConfig
	}
	return lm.Config
}

// Close frees the model and closes its folder.
func (lm *LoadedModel) Close() error {
	err := lm.Model.Close()
	if lm.folder != nil {
		err = errors.Join(err, lm.folder.Close())
	}
	return err
}

// idTokenizer stands in for a tokenizer when a shape has none: token id 42 reads " t42". It gives the
// engine's detokenizer real work of a realistic size.
type idTokenizer struct{}

// Decode spells every id.
func (idTokenizer) Decode(ids []int32, _ bool) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(" t")
		b.WriteString(strconv.Itoa(int(id)))
	}
	return b.String()
}
