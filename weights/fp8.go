package weights

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"

	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/internal/fanout"
)

// LinearModules returns the names of the model's Linear layers, as quantization_config's targets and
// ignore lists name them: per layer "….self_attn.q_proj" (k, v, o) and "….mlp.gate_proj" (up, down),
// and the LM head ("lm_head") unless it is tied to the embeddings. A layer's weight is the tensor
// name + ".weight".
func (c *Config) LinearModules() []string {
	var out []string
	for l := range c.NumHiddenLayers {
		for _, m := range []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
			"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"} {
			out = append(out, c.LayerTensor(l, m))
		}
	}
	if !c.TieWordEmbeddings {
		out = append(out, strings.TrimSuffix(c.LMHeadTensor(), ".weight"))
	}
	return out
}

// KVScaleNames returns the names under which checkpoints store layer l's KV cache scales, as (K, V)
// pairs in the order gollm looks for them (vLLM reads the same): self_attn.k_scale and v_scale
// (llm-compressor), k_proj.output_scale and v_proj.output_scale (compressed-tensors before them, and
// AutoFP8), k_proj.k_scale and v_proj.v_scale (ModelOpt), and the deprecated self_attn.kv_scale that
// serves for both.
func (c *Config) KVScaleNames(l int) [][2]string {
	p := func(s string) string { return c.LayerTensor(l, "self_attn."+s) }
	return [][2]string{
		{p("k_scale"), p("v_scale")},
		{p("k_proj.output_scale"), p("v_proj.output_scale")},
		{p("k_proj.k_scale"), p("v_proj.v_scale")},
		{p("kv_scale"), p("kv_scale")},
	}
}

// scalarShapes are the shapes a per-tensor scale is stored in.
var scalarShapes = [][]int{{}, {1}}

// quantTensors is what quantization_config makes a checkpoint hold beyond TensorShapes: the weights
// stored as F8_E4M3, and the scale tensors with the shapes each may have.
type quantTensors struct {
	quantized bool
	fp8       map[string]bool
	scales    map[string][][]int
}

// notQuantized says why an F8_E4M3 tensor is out of place.
func (q quantTensors) notQuantized() string {
	if !q.quantized {
		return "the config has no quantization_config"
	}
	return "quantization_config does not quantize it"
}

// quantizedTensors works out quantTensors for c and the KV scales s holds, with the problems found: a
// layer whose scheme is ambiguous, KV scales missing where kv_cache_scheme requires them, or stored
// under two names.
func (c *Config) quantizedTensors(s *TensorSet) (quantTensors, []error) {
	q := quantTensors{fp8: map[string]bool{}, scales: map[string][][]int{}}
	if c.Quantization == nil {
		return q, nil
	}
	q.quantized = true
	shapes := TensorShapes(c)
	var problems []error
	for _, m := range c.LinearModules() {
		scheme, ok, err := c.Quantization.Scheme(m)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if !ok {
			continue
		}
		q.fp8[m+".weight"] = true
		if scheme.Block != [2]int{} {
			q.scales[m+".weight_scale_inv"] = [][]int{blockScaleShape(shapes[m+".weight"], scheme.Block)}
			continue
		}
		q.scales[m+".weight_scale"] = scalarShapes
		if scheme.PerChannel {
			q.scales[m+".weight_scale"] = [][]int{{shapes[m+".weight"][0], 1}}
		}
		if scheme.StaticInput {
			q.scales[m+".input_scale"] = scalarShapes
		}
	}
	for l := range c.NumHiddenLayers {
		var found [][2]string
		for _, pair := range c.KVScaleNames(l) {
			_, hasK := s.tensors[pair[0]]
			_, hasV := s.tensors[pair[1]]
			switch {
			case hasK && hasV:
				found = append(found, pair)
			case hasK:
				problems = append(problems, fmt.Errorf("tensor %q without %q: %w", pair[0], pair[1], ErrTensorNotFound))
			case hasV:
				problems = append(problems, fmt.Errorf("tensor %q without %q: %w", pair[1], pair[0], ErrTensorNotFound))
			}
		}
		switch {
		case len(found) > 1:
			problems = append(problems, fmt.Errorf("layer %d: KV cache scales stored twice, as %q and %q: %w", l, found[0][0], found[1][0], ErrInvalid))
		case len(found) == 1:
			q.scales[found[0][0]], q.scales[found[0][1]] = scalarShapes, scalarShapes
		case c.Quantization.KVCacheScales:
			problems = append(problems, fmt.Errorf("layer %d: quantization_config has a kv_cache_scheme, but neither %q nor any other naming of the KV cache scales is in the checkpoint: %w",
				l, c.KVScaleNames(l)[0][0], ErrTensorNotFound))
		}
	}
	return q, problems
}

// shapesText writes a list of accepted shapes for an error message: "[] or [1]".
func shapesText(shapes [][]int) string {
	parts := make([]string, len(shapes))
	for i, s := range shapes {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, " or ")
}

// blockScaleShape is the shape of the block-wise scales of a weight of shape w: one per block, the
// edge blocks partial.
func blockScaleShape(w []int, block [2]int) []int {
	return []int{(w[0] + block[0] - 1) / block[0], (w[1] + block[1] - 1) / block[1]}
}

// FP8Linear is one quantized Linear layer as its checkpoint stores it, checked: the weight's real
// value is W[n][k] = e4m3(Weight[n][k]) · Scales[n], or with block-wise scales (Block not zero)
// e4m3(Weight[n][k]) · BlockScales[(n/Block[0])·ceil(K/Block[1]) + k/Block[1]].
type FP8Linear struct {
	// Weight is the F8_E4M3 matrix [N][K] (its Data aliases the checkpoint's memory map).
	Weight *Tensor
	// Scales holds one scale per output row, each finite and positive: a per-tensor scale repeated N
	// times, or the per-channel scales.
	Scales []float32
	// InputScale is the static scale of the layer's input (FP8Scheme.StaticInput), finite and positive;
	// 0 when the input is scaled per token at run time.
	InputScale float32
	// Block and BlockScales are the block-wise scales (FP8Scheme.Block), each finite and positive, in
	// place of Scales (nil then).
	Block       [2]int
	BlockScales []float32
}

// DequantizeFP8 returns l's real weight as an F32 tensor named as l.Weight: each code's e4m3 value
// times its scale, rounded once to float32. Rows are shared out among GOMAXPROCS goroutines: a
// block-wise checkpoint dequantizes every layer at load.
func DequantizeFP8(l *FP8Linear) *Tensor {
	rows, cols := l.Weight.Shape[0], l.Weight.Shape[1]
	data := make([]byte, 4*rows*cols)
	bc := 0 // block-wise: the scales of a row of blocks
	if l.BlockScales != nil {
		bc = blockScaleShape(l.Weight.Shape, l.Block)[1]
	}
	fanout.For(runtime.GOMAXPROCS(0), rows, func() []float32 { return make([]float32, cols) }, func(out []float32, n int) {
		codes := l.Weight.Data[n*cols : (n+1)*cols]
		if l.BlockScales == nil {
			dtype.DecodeE4M3(out, codes, l.Scales[n])
		} else { // one scale a run of Block[1] columns
			scales := l.BlockScales[(n/l.Block[0])*bc:][:bc]
			for j, sc := range scales {
				a, b := j*l.Block[1], min((j+1)*l.Block[1], cols)
				dtype.DecodeE4M3(out[a:b], codes[a:b], sc)
			}
		}
		dtype.EncodeF32(data[4*n*cols:4*(n+1)*cols], out)
	})
	return &Tensor{Name: l.Weight.Name, DType: DTypeF32, Shape: []int{rows, cols}, Data: data}
}

// ReadFP8Linear reads the quantized Linear layer module of a checkpoint with config c, whose tensors
// get returns, and checks its scales: present, of the shape the scheme implies, finite and positive.
// Every error names the tensor and wraps ErrTensorNotFound, ErrShapeMismatch or ErrInvalid.
func ReadFP8Linear(c *Config, get func(name string) (*Tensor, error), module string) (*FP8Linear, error) {
	scheme, ok, err := c.Quantization.Scheme(module)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("layer %s: quantization_config does not quantize it: %w", module, ErrInvalid)
	}
	w, err := get(module + ".weight")
	if err != nil {
		return nil, err
	}
	if w.DType != DTypeF8E4M3 || len(w.Shape) != 2 {
		return nil, fmt.Errorf("tensor %q: %v %v, want an F8_E4M3 matrix: %w", w.Name, w.DType, w.Shape, ErrInvalid)
	}
	rows := w.Shape[0]
	if scheme.Block != [2]int{} {
		scales, err := readScales(get, module+".weight_scale_inv", [][]int{blockScaleShape(w.Shape, scheme.Block)})
		if err != nil {
			return nil, err
		}
		return &FP8Linear{Weight: w, Block: scheme.Block, BlockScales: scales}, nil
	}
	want := scalarShapes
	if scheme.PerChannel {
		want = [][]int{{rows, 1}}
	}
	scales, err := readScales(get, module+".weight_scale", want)
	if err != nil {
		return nil, err
	}
	out := &FP8Linear{Weight: w, Scales: scales}
	if !scheme.PerChannel {
		out.Scales = make([]float32, rows)
		for i := range out.Scales {
			out.Scales[i] = scales[0]
		}
	}
	if scheme.StaticInput {
		in, err := readScales(get, module+".input_scale", scalarShapes)
		if err != nil {
			return nil, err
		}
		out.InputScale = in[0]
	}
	return out, nil
}

// ReadKVScales returns layer l's K and V cache scales from the first of KVScaleNames that the
// checkpoint holds; ok is false when it holds none. Each must be a finite positive scalar.
func ReadKVScales(c *Config, get func(name string) (*Tensor, error), l int) (k, v float32, ok bool, err error) {
	for _, pair := range c.KVScaleNames(l) {
		ks, err := readScales(get, pair[0], scalarShapes)
		if errors.Is(err, ErrTensorNotFound) {
			continue
		}
		if err != nil {
			return 0, 0, false, err
		}
		vs, err := readScales(get, pair[1], scalarShapes)
		if err != nil {
			return 0, 0, false, err
		}
		return ks[0], vs[0], true, nil
	}
	return 0, 0, false, nil
}

// readScales reads the scale tensor name, which must have one of the shapes want and finite positive
// values small enough that every code they scale is a finite float32 (448, e4m3's largest, times the
// scale): a larger one would make its weights, inputs or K/V infinite.
func readScales(get func(name string) (*Tensor, error), name string, want [][]int) ([]float32, error) {
	t, err := get(name)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(want, func(s []int) bool { return slices.Equal(s, t.Shape) }) {
		return nil, fmt.Errorf("tensor %q: shape %v, want %s: %w", name, t.Shape, shapesText(want), ErrShapeMismatch)
	}
	if d := t.DType; d != DTypeF32 && d != DTypeBF16 && d != DTypeF16 {
		return nil, fmt.Errorf("tensor %q: dtype %v, want a scale in F32, BF16 or F16: %w", name, d, ErrUnsupported)
	}
	v := t.Float32()
	for i, x := range v {
		if !(x > 0) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("tensor %q: scale %d is %v; scales must be finite and positive: %w", name, i, x, ErrInvalid)
		}
		if float64(x)*448 > math.MaxFloat32 {
			return nil, fmt.Errorf("tensor %q: scale %d is %v; 448 (e4m3's largest code) times it overflows float32: %w",
				name, i, x, ErrInvalid)
		}
	}
	return v, nil
}
