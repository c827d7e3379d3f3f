package model

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"

	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/internal/fanout"
	"github.com/gollm/gollm/weights"
)

// RandomStd is the standard deviation of the random matrices LoadRandom draws: transformers' default
// initializer_range for LLaMA, with which its own _init_weights fills Linear and Embedding layers.
const RandomStd = 0.02

// LoadRandom builds a model of shape cfg with random parameters, as if cfg's checkpoint had been
// initialised by transformers (matrices and embeddings N(0, RandomStd²), RMSNorm gains 1, biases 0) and saved in
// cfg.DType. It goes through the same upload path as LoadOn, so any backend gets random weights without
// a checkpoint on disk: this is what lets a benchmark measure a Llama-3-8B shape without downloading
// it. The tensors are generated one at a time, in parallel chunks, and handed to the backend at once,
// so the host memory beyond the backend's own is one tensor (two for the stacked Q/K/V and gate/up).
//
// newBackend nil means the backend opts.Device names, as Load chooses it (the CPU by default, or the
// GPU with Options.Device "cuda"). The values depend only on seed and each tensor's name (never on
// GOMAXPROCS or load order): the same seed gives the same model on every machine and backend.
func LoadRandom(cfg *weights.Config, seed uint64, opts Options, newBackend NewBackendFunc) (*Model, error) {
	if cfg == nil {
		return nil, errors.New("model: load random: nil config")
	}
	src, err := newRandomSource(cfg, seed)
	if err != nil {
		return nil, fmt.Errorf("model: load random: %w", err)
	}
	deferKV := false
	if newBackend == nil {
		if newBackend, deferKV, err = backendFor(cfg, opts); err != nil {
			return nil, fmt.Errorf("model: load random: %w", err)
		}
	}
	opts.SkipWeightCheck = true // the weights are drawn here, finite by construction
	return loadContext(context.Background(), cfg, src.tensor, opts, newBackend, deferKV)
}

// randomSource draws the tensors of one random checkpoint on demand.
type randomSource struct {
	dtype      weights.DType
	normOffset float64 // Config.NormOffset
	seed       uint64
	shapes     map[string][]int
}

func newRandomSource(cfg *weights.Config, seed uint64) (*randomSource, error) {
	if !cfg.DType.Valid() {
		return nil, fmt.Errorf("config dtype %v is not float32, float16 or bfloat16", cfg.DType)
	}
	c := *cfg
	c.HeadDim = headDim(cfg) // TensorShapes reads HeadDim as given
	return &randomSource{dtype: cfg.DType, normOffset: cfg.NormOffset, seed: seed, shapes: weights.TensorShapes(&c)}, nil
}

// randomChunk is the number of elements drawn from one generator stream: chunks are filled in
// parallel, and the stream of a chunk is fixed by (seed, tensor name, chunk index).
const randomChunk = 1 << 16

// tensor returns the named tensor, freshly drawn (tensorGetter's contract).
func (r *randomSource) tensor(name string) (*weights.Tensor, error) {
	shape, ok := r.shapes[name]
	if !ok {
		return nil, fmt.Errorf("random checkpoint has no tensor %q: %w", name, weights.ErrTensorNotFound)
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	size := r.dtype.Size()
	t := &weights.Tensor{Name: name, DType: r.dtype, Shape: slices.Clone(shape), Data: make([]byte, n*size)}
	if strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, ".bias") {
		// As transformers initialises them: RMSNorm gains 1 (a stored 0 where the norm multiplies by
		// 1 + w), biases 0.
		one := make([]byte, size)
		if strings.HasSuffix(name, "norm.weight") && r.normOffset == 0 {
			encodeValues(one, []float32{1}, r.dtype)
		}
		for i := 0; i < len(t.Data); i += size {
			copy(t.Data[i:], one)
		}
		return t, nil
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	stream := h.Sum64()
	numChunks := (n + randomChunk - 1) / randomChunk
	fanout.For(runtime.GOMAXPROCS(0), numChunks, func() []float32 { return make([]float32, randomChunk) }, func(buf []float32, c int) {
		lo, hi := c*randomChunk, min((c+1)*randomChunk, n)
		rng := rand.New(rand.NewPCG(r.seed^stream, uint64(c)))
		vals := buf[:hi-lo]
		for i := range vals {
			vals[i] = float32(RandomStd * rng.NormFloat64())
		}
		encodeValues(t.Data[lo*size:hi*size], vals, r.dtype)
	})
	return t, nil
}

// encodeValues writes v into dst in dtype d (rounded to nearest, ties to even).
func encodeValues(dst []byte, v []float32, d weights.DType) {
	switch d {
	case weights.DTypeBF16:
		dtype.EncodeBF16(dst, v)
	case weights.DTypeF16:
		dtype.EncodeF16(dst, v)
	case weights.DTypeF32:
		dtype.EncodeF32(dst, v)
	default:
		panic(fmt.Sprintf("model: encode values: dtype %v", d)) // newRandomSource rejects these
	}
}
