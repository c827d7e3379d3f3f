package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gollm/gollm/weights"
)

// Load builds the model in f on the backend opts.Device names: the pure-Go CPU backend by default (see
// NewCPUBackend for its memory cost), or the GPU (Options.Device "cuda" or "auto").
func Load(f *weights.Folder, opts Options) (*Model, error) {
	return LoadContext(context.Background(), f, opts)
}

// LoadContext is Load that gives up when ctx ends: it checks ctx before each tensor it uploads, and
// then frees what it built and returns an error wrapping ctx's.
func LoadContext(ctx context.Context, f *weights.Folder, opts Options) (*Model, error) {
	if f == nil || f.Config == nil || f.Tensors == nil {
		return nil, errors.New("model: load: folder has no config or tensors")
	}
	newBackend, deferKV, err := backendFor(f.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	return loadContext(ctx, f.Config, f.Tensors.Get, opts, newBackend, deferKV)
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
	return loadContext(context.Background(), cfg, get, opts, newBackend, false)
}

// loadContext builds the model on the backend newBackend constructs, giving up when ctx ends. With
// deferKV the backend is built without its KV pool (Shape.NumBlocks 0) and allocates opts.NumBlocks
// pages once the weights and the workspace are in place (kvAllocator), where it can tell whether they
// fit.
func loadContext(ctx context.Context, cfg *weights.Config, get tensorGetter, opts Options, newBackend NewBackendFunc, deferKV bool) (*Model, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	if opts.TensorParallel < 0 {
		return nil, fmt.Errorf("model: load: tensor parallel size %d must be at least 1", opts.TensorParallel)
	}
	get = dequantizingGetter(cfg, get, opts.Logger)
	if opts.TensorParallel > 1 {
		return loadParallel(ctx, cfg, get, opts, newBackend, deferKV)
	}
	m, built, err := loadWeights(ctx, cfg, get, opts, newBackend, deferKV)
	if err != nil {
		return nil, err
	}
	if built.NumBlocks == 0 {
		if err := m.sizeKV(opts); err != nil {
			m.backend.Close()
			return nil, fmt.Errorf("model: load: %w", err)
		}
	}
	return m, nil
}

// loadWeights is loadContext but for the KV pool: it builds the backend (without its pool when deferKV)
// and uploads every parameter; built is the shape the backend was built with (NumBlocks 0: no pool yet).
func loadWeights(ctx context.Context, cfg *weights.Config, get tensorGetter, opts Options, newBackend NewBackendFunc, deferKV bool) (_ *Model, built Shape, _ error) {
	shape, err := shapeOf(cfg, opts)
	if err != nil {
		return nil, built, fmt.Errorf("model: load: %w", err)
	}
	if shape.KVCacheDType == KVCacheFP8 {
		if shape.KVScales, err = kvScales(cfg, get, opts.Logger); err != nil {
			return nil, built, fmt.Errorf("model: load: %w", err)
		}
	}
	built = shape
	if deferKV {
		built.NumBlocks = 0
	}
	backend, err := newBackend(built)
	if err != nil {
		return nil, built, fmt.Errorf("model: load: backend: %w", err)
	}
	if fc, ok := backend.(fp8Checker); ok {
		if err := fc.checkFP8(UsesFP8Weights(cfg, opts.Quantization), shape); err != nil {
			backend.Close()
			return nil, built, fmt.Errorf("model: load: %w", err)
		}
	}
	m := &Model{cfg: cfg, shape: shape, backend: backend, eps: float32(cfg.RMSNormEps),
		gelu: cfg.Activation() == weights.ActGELUTanh, softcap: float32(cfg.FinalLogitSoftcap)}
	if err := m.uploadAll(ctx, get, opts.Progress, !opts.SkipWeightCheck, opts.Quantization == QuantizationFP8); err != nil {
		backend.Close()
		return nil, built, fmt.Errorf("model: load: %w", err)
	}
	return m, built, nil
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
	if err := checkQuantization(opts.Quantization); err != nil {
		return Shape{}, err
	}
	kvDType, err := parseKVCacheDType(opts.KVCacheDType)
	if err != nil {
		return Shape{}, err
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
	shape := Shape{
		NumLayers:            cfg.NumHiddenLayers,
		HiddenSize:           cfg.HiddenSize,
		NumHeads:             cfg.NumAttentionHeads,
		NumKVHeads:           cfg.NumKeyValueHeads,
		HeadDim:              d,
		RopeInvFreq:          inv,
		RopeAttentionScaling: 1,
		NumBlocks:            opts.NumBlocks,
		BlockSize:            blockSize,
		KVCacheDType:         kvDType,
	}
	if cfg.LocalRopeTheta > 0 {
		if shape.LocalRopeInvFreq, err = ropeInvFreq(d, cfg.LocalRopeTheta, cfg.LocalRopeScaling); err != nil {
			return Shape{}, err
		}
	}
	if cfg.SlidingWindow > 0 || shape.LocalRopeInvFreq != nil {
		kv := KVLayoutOf(cfg)
		if len(kv.Windows) > 1 || kv.Windows[0] > 0 {
			shape.KVGroups, shape.KVSlots = kv.Windows, kv.Slots
		}
		shape.Layers = make([]LayerShape, cfg.NumHiddenLayers)
		for l := range shape.Layers {
			shape.Layers[l] = LayerShape{
				Window:    cfg.LayerWindow(l),
				LocalRope: shape.LocalRopeInvFreq != nil && cfg.LayerType(l) == weights.SlidingAttention,
				KVGroup:   kv.Group[l],
				KVSlot:    kv.Slot[l],
			}
		}
	}
	if cfg.QueryPreAttnScalar > 0 {
		// transformers' scaling = query_pre_attn_scalar**-0.5, a Python float rounded to float32.
		shape.AttentionScale = float32(math.Pow(cfg.QueryPreAttnScalar, -0.5))
	}
	if cfg.EmbedScale {
		// transformers' embed_scale = torch.tensor(hidden_size**0.5): a float32.
		shape.EmbedScale = float32(math.Sqrt(float64(cfg.HiddenSize)))
	}
	return shape, nil
}

// uploadAll hands every parameter to the backend, checking each shape against the config and, with
// checkValues, that every value is finite (checkFinite), and reports the bytes uploaded so far to
// progress (when not nil). The Linear layers go up as FP8 (UploadFP8) where the checkpoint quantizes
// them, or, with online, all but the LM head quantized here (quantizeFP8). It stops with ctx's error
// before the next tensor once ctx ends.
func (m *Model) uploadAll(ctx context.Context, get tensorGetter, progress func(loaded, total int64), checkValues, online bool) error {
	c, s := m.cfg, m.shape
	h, inter, d := c.HiddenSize, c.IntermediateSize, s.HeadDim
	elem := int64(c.DType.Size())
	if elem == 0 {
		elem = 4
	}
	// elemOf is a tensor's bytes per element in the checkpoint: 1 for its FP8 weights.
	fp8 := fp8WeightNames(c, "")
	elemOf := func(name string) int64 {
		if fp8[name] {
			return 1
		}
		return elem
	}
	var loaded, total int64
	for name, shape := range weights.TensorShapes(c) {
		n := elemOf(name)
		for _, dim := range shape {
			n *= int64(dim)
		}
		total += n
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	progress(0, total)
	// fetch returns the named tensors stacked into one, checked for its shape ([rows][cols], or [rows]
	// when cols is 0) and, with checkValues, its values.
	fetch := func(rows, cols int, names ...string) (*weights.Tensor, error) {
		parts := make([]*weights.Tensor, len(names))
		for i, name := range names {
			t, err := get(name)
			if err != nil {
				return nil, fmt.Errorf("tensor %q: %w", name, err)
			}
			if t.DType == weights.DTypeF8E4M3 {
				return nil, fmt.Errorf("tensor %q: F8_E4M3 where the checkpoint's quantization_config expects %v", name, c.DType)
			}
			if checkValues {
				if err := checkFinite(t); err != nil {
					return nil, err
				}
			}
			parts[i] = t
		}
		t, err := stackRows(parts)
		if err != nil {
			return nil, err
		}
		want := []int{rows, cols}
		if cols == 0 {
			want = []int{rows}
		}
		if !slices.Equal(t.Shape, want) {
			return nil, fmt.Errorf("tensor %q: shape %v, want %v", t.Name, t.Shape, want)
		}
		return t, nil
	}
	// advance reports the bytes of the named tensors as loaded.
	advance := func(rows, cols int, names ...string) {
		loaded += int64(rows) * int64(max(cols, 1)) * elemOf(names[0])
		progress(min(loaded, total), total)
	}
	// up uploads the named tensors stacked into one; a norm's weight gets the family's offset added
	// first.
	up := func(rows, cols int, names ...string) (Weight, error) {
		if err := ctx.Err(); err != nil {
			return Weight{}, err
		}
		defer advance(rows, cols, names...)
		t, err := fetch(rows, cols, names...)
		if err != nil {
			return Weight{}, err
		}
		if c.NormOffset != 0 && strings.HasSuffix(t.Name, "norm.weight") {
			t = offsetNorm(t, float32(c.NormOffset))
		}
		w, err := m.backend.Upload(t)
		if err != nil {
			return Weight{}, fmt.Errorf("upload %q: %w", t.Name, err)
		}
		return w, nil
	}
	// upMatrix uploads the Linear layers named (their weights, stacked into one product) as the
	// checkpoint stores them, or in FP8 (linearKind).
	upMatrix := func(rows, cols int, names ...string) (Weight, error) {
		modules := make([]string, len(names))
		for i, n := range names {
			modules[i] = strings.TrimSuffix(n, ".weight")
		}
		kind, err := m.linearKind(modules, online)
		if err != nil {
			return Weight{}, err
		}
		if kind == linearFloat {
			return up(rows, cols, names...)
		}
		if err := ctx.Err(); err != nil {
			return Weight{}, err
		}
		defer advance(rows, cols, names...)
		var fw *FP8Weight
		if kind == linearCheckpoint {
			fw, err = m.checkpointFP8(get, modules, rows, cols, checkValues)
		} else {
			var t *weights.Tensor
			if t, err = fetch(rows, cols, names...); err == nil {
				fw = quantizeFP8(t)
			}
		}
		if err != nil {
			return Weight{}, err
		}
		w, err := m.backend.UploadFP8(fw)
		if err != nil {
			return Weight{}, fmt.Errorf("upload %q: %w", fw.Name, err)
		}
		return w, nil
	}
	// upBiased uploads a projection and, when biased, its bias (stacked like the weights).
	upBiased := func(biased bool, rows, cols int, names ...string) (Weight, error) {
		upload := upMatrix
		if cols == 0 { // a norm's vector
			upload = up
		}
		w, err := upload(rows, cols, names...)
		if err != nil || !biased {
			return w, err
		}
		biases := make([]string, len(names))
		for i, n := range names {
			biases[i] = strings.TrimSuffix(n, ".weight") + ".bias"
		}
		bias, err := up(rows, 0, biases...)
		w.Bias = &bias
		return w, err
	}
	var err error
	if m.embed, err = up(c.VocabSize, h, c.Tensor("embed_tokens.weight")); err != nil {
		return err
	}
	m.layers = make([]layerWeights, c.NumHiddenLayers)
	qkvRows := s.QKVCols()
	for l := range m.layers {
		p := func(suffix string) string { return c.LayerTensor(l, suffix) }
		lw := &m.layers[l]
		mlpNorm := "post_attention_layernorm.weight" // LLaMA's norm before the MLP
		if c.SandwichNorm {
			mlpNorm = "pre_feedforward_layernorm.weight"
		}
		steps := []struct {
			dst        *Weight
			want       bool
			bias       bool
			rows, cols int
			names      []string
		}{
			{&lw.inputNorm, true, false, h, 0, []string{p("input_layernorm.weight")}},
			{&lw.qkv, true, c.QKVBias, qkvRows, h, []string{p("self_attn.q_proj.weight"), p("self_attn.k_proj.weight"), p("self_attn.v_proj.weight")}},
			{&lw.qNorm, c.QKNorm, false, d, 0, []string{p("self_attn.q_norm.weight")}},
			{&lw.kNorm, c.QKNorm, false, d, 0, []string{p("self_attn.k_norm.weight")}},
			{&lw.o, true, c.OBias, h, s.NumHeads * d, []string{p("self_attn.o_proj.weight")}},
			{&lw.attnOutNorm, c.SandwichNorm, false, h, 0, []string{p("post_attention_layernorm.weight")}},
			{&lw.mlpNorm, true, false, h, 0, []string{p(mlpNorm)}},
			{&lw.gateUp, true, false, 2 * inter, h, []string{p("mlp.gate_proj.weight"), p("mlp.up_proj.weight")}},
			{&lw.down, true, false, h, inter, []string{p("mlp.down_proj.weight")}},
			{&lw.mlpOutNorm, c.SandwichNorm, false, h, 0, []string{p("post_feedforward_layernorm.weight")}},
		}
		for _, st := range steps {
			if !st.want {
				continue
			}
			if *st.dst, err = upBiased(st.bias, st.rows, st.cols, st.names...); err != nil {
				return err
			}
		}
	}
	if m.finalNorm, err = up(h, 0, c.Tensor("norm.weight")); err != nil {
		return err
	}
	if c.TieWordEmbeddings {
		m.lmHead = m.embed
	} else if m.lmHead, err = upMatrix(c.VocabSize, h, c.LMHeadTensor()); err != nil {
		return err
	}
	return nil
}

// offsetNorm returns a float32 copy of the norm weight t with offset added to every element: Gemma's
// RMSNorm multiplies by (1 + w), computed in float32 as transformers computes it, which the forward pass
// then treats as any norm's weight.
func offsetNorm(t *weights.Tensor, offset float32) *weights.Tensor {
	v := t.Float32()
	for i := range v {
		v[i] += offset
	}
	return &weights.Tensor{Name: t.Name, DType: weights.DTypeF32, Shape: slices.Clone(t.Shape), Data: float32Bytes(v)}
}

// stackRows concatenates matrices with equal column counts, or vectors, along their first dimension (a
// single tensor is returned as is). Parts of one dtype are joined byte for byte; mixed dtypes are joined
// as float32.
func stackRows(parts []*weights.Tensor) (*weights.Tensor, error) {
	if len(parts) == 1 {
		return parts[0], nil
	}
	first := parts[0]
	rows, sameDType := 0, true
	for _, p := range parts {
		if len(p.Shape) != len(first.Shape) || len(p.Shape) < 1 || len(p.Shape) > 2 || !slices.Equal(p.Shape[1:], first.Shape[1:]) {
			return nil, fmt.Errorf("tensor %q: shape %v cannot be stacked with %q %v", p.Name, p.Shape,
				first.Name, first.Shape)
		}
		rows += p.Shape[0]
		sameDType = sameDType && p.DType == first.DType
	}
	out := &weights.Tensor{Name: first.Name + "+", DType: first.DType, Shape: append([]int{rows}, first.Shape[1:]...)}
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
