package model

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/gollm/gollm/weights"
)

// Load builds the model in f on the backend opts.Device names: the pure-Go CPU backend by default (see
// NewCPUBackend for its memory cost), or the GPU (Options.Device "cuda" or "auto").
func Load(f *weights.Folder, opts Options) (*Model, error) {
	if f == nil || f.Config == nil || f.Tensors == nil {
		return nil, errors.New("model: load: folder has no config or tensors")
	}
	newBackend, deferKV, err := backendFor(f.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	return loadKV(f.Config, f.Tensors.Get, opts, newBackend, deferKV)
}

// LoadOn builds the model in f on the backend that newBackend constructs: it checks the config,
// computes the rotary frequencies, then uploads every parameter once (Q/K/V and gate/up stacked into
// one matrix each). The backend is closed again if loading fails.
func LoadOn(f *weights.Folder, opts Options, newBackend NewBackendFunc) (*Model, error) {
	if f == nil || f.Config == nil || f.Tensors == nil {
		return nil, errors.New("model: load: folder has no config or tensors")
	}
	return load(f.Config, f.Tensors.Get, opts, newBackend)
}

// tensorGetter returns a checkpoint tensor by name (weights.TensorSet.Get).
type tensorGetter func(name string) (*weights.Tensor, error)

// load builds the model on the backend newBackend constructs, with its KV pool.
func load(cfg *weights.Config, get tensorGetter, opts Options, newBackend NewBackendFunc) (*Model, error) {
	return loadKV(cfg, get, opts, newBackend, false)
}

// loadKV builds the model on the backend newBackend constructs. With deferKV the backend is built without
// its KV pool (Shape.NumBlocks 0) and allocates opts.NumBlocks pages once the weights and the workspace
// are in place (kvAllocator), where it can tell whether they fit.
func loadKV(cfg *weights.Config, get tensorGetter, opts Options, newBackend NewBackendFunc, deferKV bool) (*Model, error) {
	shape, err := shapeOf(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	built := shape
	if deferKV {
		built.NumBlocks = 0
	}
	backend, err := newBackend(built)
	if err != nil {
		return nil, fmt.Errorf("model: load: backend: %w", err)
	}
	m := &Model{cfg: cfg, shape: shape, backend: backend, eps: float32(cfg.RMSNormEps)}
	if err := m.uploadAll(get, opts.Progress, !opts.SkipWeightCheck); err != nil {
		backend.Close()
		return nil, fmt.Errorf("model: load: %w", err)
	}
	if built.NumBlocks == 0 {
		if err := m.sizeKV(opts); err != nil {
			backend.Close()
			return nil, fmt.Errorf("model: load: %w", err)
		}
	}
	return m, nil
}

// shapeOf validates the parts of cfg the forward pass relies on and derives the backend's Shape.
func shapeOf(cfg *weights.Config, opts Options) (Shape, error) {
	if opts.NumBlocks < 0 {
		return Shape{}, fmt.Errorf("options: NumBlocks %d must not be negative", opts.NumBlocks)
	}
	blockSize := opts.BlockSize
	if blockSize == 0 {
		blockSize = DefaultBlockSize
	}
	if blockSize < 0 {
		return Shape{}, fmt.Errorf("options: BlockSize %d must be positive", blockSize)
	}
	d := headDim(cfg)
	switch {
	case cfg.VocabSize <= 0, cfg.HiddenSize <= 0, cfg.IntermediateSize <= 0, cfg.NumHiddenLayers <= 0,
		cfg.NumAttentionHeads <= 0, cfg.NumKeyValueHeads <= 0, d <= 0:
		return Shape{}, fmt.Errorf("config: sizes must be positive: %+v", *cfg)
	case cfg.NumAttentionHeads%cfg.NumKeyValueHeads != 0:
		return Shape{}, fmt.Errorf("config: %d attention heads are not a multiple of %d key/value heads",
			cfg.NumAttentionHeads, cfg.NumKeyValueHeads)
	case !(cfg.RMSNormEps > 0):
		return Shape{}, fmt.Errorf("config: rms_norm_eps %v must be positive", cfg.RMSNormEps)
	}
	inv, err := ropeInvFreq(d, cfg.RopeTheta, cfg.RopeScaling)
	if err != nil {
		return Shape{}, err
	}
	return Shape{
		NumLayers:            cfg.NumHiddenLayers,
		HiddenSize:           cfg.HiddenSize,
		NumHeads:             cfg.NumAttentionHeads,
		NumKVHeads:           cfg.NumKeyValueHeads,
		HeadDim:              d,
		RopeInvFreq:          inv,
		RopeAttentionScaling: 1,
		NumBlocks:            opts.NumBlocks,
		BlockSize:            blockSize,
	}, nil
}

// uploadAll hands every parameter to the backend, checking each shape against the config and, with
// checkValues, that every value is finite (checkFinite).
func (m *Model) uploadAll(get tensorGetter, progress io.Writer, checkValues bool) error {
	c, s := m.cfg, m.shape
	h, inter, d := c.HiddenSize, c.IntermediateSize, s.HeadDim
	bar := newProgressBar(progress, c.NumHiddenLayers+2)
	up := func(rows, cols int, names ...string) (Weight, error) {
		parts := make([]*weights.Tensor, len(names))
		for i, name := range names {
			t, err := get(name)
			if err != nil {
				return Weight{}, fmt.Errorf("tensor %q: %w", name, err)
			}
			if checkValues {
				if err := checkFinite(t); err != nil {
					return Weight{}, err
				}
			}
			parts[i] = t
		}
		t, err := stackRows(parts)
		if err != nil {
			return Weight{}, err
		}
		if want := []int{rows, cols}; cols == 0 {
			want = []int{rows}
			if !slices.Equal(t.Shape, want) {
				return Weight{}, fmt.Errorf("tensor %q: shape %v, want %v", t.Name, t.Shape, want)
			}
		} else if !slices.Equal(t.Shape, want) {
			return Weight{}, fmt.Errorf("tensor %q: shape %v, want %v", t.Name, t.Shape, want)
		}
		w, err := m.backend.Upload(t)
		if err != nil {
			return Weight{}, fmt.Errorf("upload %q: %w", t.Name, err)
		}
		return w, nil
	}
	var err error
	if m.embed, err = up(c.VocabSize, h, "model.embed_tokens.weight"); err != nil {
		return err
	}
	bar.advance()
	m.layers = make([]layerWeights, c.NumHiddenLayers)
	qkvRows := s.QKVCols()
	for l := range m.layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		lw := &m.layers[l]
		steps := []struct {
			dst        *Weight
			rows, cols int
			names      []string
		}{
			{&lw.inputNorm, h, 0, []string{p + "input_layernorm.weight"}},
			{&lw.qkv, qkvRows, h, []string{p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"}},
			{&lw.o, h, s.NumHeads * d, []string{p + "self_attn.o_proj.weight"}},
			{&lw.postNorm, h, 0, []string{p + "post_attention_layernorm.weight"}},
			{&lw.gateUp, 2 * inter, h, []string{p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}},
			{&lw.down, h, inter, []string{p + "mlp.down_proj.weight"}},
		}
		for _, st := range steps {
			if *st.dst, err = up(st.rows, st.cols, st.names...); err != nil {
				return err
			}
		}
		bar.advance()
	}
	if m.finalNorm, err = up(h, 0, "model.norm.weight"); err != nil {
		return err
	}
	if c.TieWordEmbeddings {
		m.lmHead = m.embed
	} else if m.lmHead, err = up(c.VocabSize, h, "lm_head.weight"); err != nil {
		return err
	}
	bar.advance()
	bar.done()
	return nil
}

// stackRows concatenates matrices with equal column counts along their first dimension (a single tensor
// is returned as is). Parts of one dtype are joined byte for byte; mixed dtypes are joined as float32.
func stackRows(parts []*weights.Tensor) (*weights.Tensor, error) {
	if len(parts) == 1 {
		return parts[0], nil
	}
	first := parts[0]
	rows, sameDType := 0, true
	for _, p := range parts {
		if len(p.Shape) != 2 || p.Shape[1] != first.Shape[1] || len(first.Shape) != 2 {
			return nil, fmt.Errorf("tensor %q: shape %v cannot be stacked with %q %v", p.Name, p.Shape,
				first.Name, first.Shape)
		}
		rows += p.Shape[0]
		sameDType = sameDType && p.DType == first.DType
	}
	out := &weights.Tensor{Name: first.Name + "+", DType: first.DType, Shape: []int{rows, first.Shape[1]}}
	if sameDType {
		for _, p := range parts {
			out.Data = append(out.Data, p.Data...)
		}
		return out, nil
	}
	out.DType = weights.DTypeF32
	for _, p := range parts {
		out.Data = append(out.Data, float32Bytes(p.Float32())...)
	}
	return out, nil
}

// float32Bytes returns the little-endian bytes of v.
func float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// progressBar draws "loading weights [=====     ] 12/32" on one line of w, rewritten with \r.
type progressBar struct {
	w        io.Writer
	n, total int
}

func newProgressBar(w io.Writer, total int) *progressBar { return &progressBar{w: w, total: total} }

func (p *progressBar) advance() {
	p.n++
	if p.w == nil {
		return
	}
	const width = 30
	filled := width * p.n / p.total
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = ' '
		if i < filled {
			bar[i] = '='
		}
	}
	fmt.Fprintf(p.w, "\rloading weights [%s] %d/%d", bar, p.n, p.total)
}

func (p *progressBar) done() {
	if p.w != nil {
		fmt.Fprintln(p.w)
	}
}
