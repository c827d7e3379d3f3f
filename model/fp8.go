package model

import (
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"

	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/weights"
)

// FP8 on gollm is a weight format and a KV format, both chosen at load (doc.go, "FP8").

// Values of Options.Quantization.
const (
	// QuantizationFP8 runs the Linear layers as FP8 W8A8 products (see Options.Quantization).
	QuantizationFP8 = "fp8"
)

// Values of Options.KVCacheDType and Shape.KVCacheDType.
const (
	// KVCacheAuto keeps the KV pages in the backend's own dtype (float32 on the CPU, the compute dtype on
	// a GPU). "" means it too.
	KVCacheAuto = "auto"
	// KVCacheFP8 stores the KV pages as OCP FP8 e4m3 with a K and a V scale per layer (Shape.KVScales).
	KVCacheFP8 = "fp8"
)

// KVScale is one layer's scales of an FP8 KV cache: K is stored as e4m3(k / K) and read back as
// float32(e4m3) · K, and V likewise.
type KVScale struct{ K, V float32 }

// fp8MinScale is the least scale a dynamic (per-token) activation, or a weight row quantized at load,
// gets: vLLM's floor (1/(448·512)), so that a row of zeros does not divide by zero.
const fp8MinScale float32 = 1.0 / (dtype.E4M3Max * 512)

// FP8Weight is a Linear layer's weight in FP8 (W8A8) as Load hands it to Backend.UploadFP8: the matrix
// [Rows][Cols] of e4m3 codes in PyTorch's Linear layout, one scale per output row (a checkpoint's
// per-tensor scale repeated, or its per-channel scales), and the scheme of its input.
//
// MatMul with it computes, for every input row r and output o, in IEEE float32 (each division and
// product correctly rounded):
//
//	s[r]     = InputScale, or when it is 0 (dynamic, per token):
//	           max(max_i |x[r][i]| / 448, 1/(448·512))
//	xq[r][i] = e4m3(x[r][i] / s[r])       dtype.F32ToE4M3Sat: nearest, ties to even, saturating to
//	                                      ±448; a NaN stays NaN (and a NaN in a row makes s[r] NaN)
//	acc[r][o] = Σ_i float32(xq[r][i]) · float32(Codes[o][i])   each product exact; summed in float32,
//	                                                           in any order
//	dst[r][o] = acc[r][o] · (s[r] · Scales[o])   then + bias[o]
//
// The CPU backend computes exactly this (it is the reference); a GPU kernel must too, up to the order
// of the float32 sum: scale the activations in the kernel that produces them by dividing (not by
// multiplying with a reciprocal, which can round differently), convert with __NV_SATFINITE without a
// clamp beforehand (a clamp with fminf would turn NaN into 448), accumulate in float32 and apply
// s[r]·Scales[o] in the epilogue.
type FP8Weight struct {
	// Name names the layer in errors ("model.layers.0.self_attn.q_proj+", stacked layers end in "+").
	Name       string
	Rows, Cols int
	// Codes holds Rows×Cols e4m3 codes; it may alias a checkpoint's memory map: a backend keeps a copy.
	Codes []byte
	// Scales holds Rows finite positive scales.
	Scales []float32
	// InputScale is the static scale of the layer's input, or 0 for per-token scales at run time.
	InputScale float32
}

// check validates w's sizes and scales.
func (w *FP8Weight) check() error {
	if w.Rows <= 0 || w.Cols <= 0 || len(w.Codes) != w.Rows*w.Cols || len(w.Scales) != w.Rows {
		return fmt.Errorf("fp8 weight %q: %d codes and %d scales for [%d][%d]", w.Name, len(w.Codes), len(w.Scales), w.Rows, w.Cols)
	}
	for i, s := range w.Scales {
		if !(s > 0) || math.IsInf(float64(s), 0) {
			return fmt.Errorf("fp8 weight %q: scale %d is %v", w.Name, i, s)
		}
	}
	if !(w.InputScale >= 0) || math.IsInf(float64(w.InputScale), 0) {
		return fmt.Errorf("fp8 weight %q: input scale %v", w.Name, w.InputScale)
	}
	return nil
}

// fp8Checker is implemented by backends that run FP8 on some devices only (the CUDA backend: FP8 weights
// and an FP8 KV cache on compute capability 8.9 or newer): load asks it, before uploading any weight,
// whether it runs FP8 weights (when the model has them) and the KV pages of s, and refuses the model
// with its error.
type fp8Checker interface {
	checkFP8(fp8Weights bool, s Shape) error
}

// parseKVCacheDType turns Options.KVCacheDType into a Shape.KVCacheDType.
func parseKVCacheDType(s string) (string, error) {
	switch s {
	case "", KVCacheAuto:
		return "", nil
	case KVCacheFP8, "fp8_e4m3":
		return KVCacheFP8, nil
	case "fp8_e5m2":
		return "", fmt.Errorf("options: kv cache dtype %q: not supported (gollm stores FP8 KV as e4m3: fp8)", s)
	}
	return "", fmt.Errorf("options: kv cache dtype %q (auto or fp8)", s)
}

// KVElementBytes is the size of one stored K or V element of a KV cache of dtype kvCacheDType
// (Options.KVCacheDType): 1 for FP8, else computeBytes (the backend's dtype: 4 on the CPU, 2 for
// bfloat16 on a GPU).
func KVElementBytes(kvCacheDType string, computeBytes int) int {
	if kv, err := parseKVCacheDType(kvCacheDType); err == nil && kv == KVCacheFP8 {
		return 1
	}
	return computeBytes
}

// checkQuantization validates Options.Quantization.
func checkQuantization(q string) error {
	if q == "" || q == QuantizationFP8 {
		return nil
	}
	return fmt.Errorf("options: quantization %q (supported: %s)", q, QuantizationFP8)
}

// linearKind says how a Linear layer (or a stack of them) is uploaded.
type linearKind int

const (
	linearFloat      linearKind = iota // the checkpoint's dtype
	linearCheckpoint                   // the checkpoint's FP8 weights and scales
	linearOnline                       // quantized here from the checkpoint's float weights
)

// linearKind returns how the Linear layers modules (stacked into one product) are uploaded: all of them
// as the checkpoint quantizes them, or all in float (quantized at load with Options.Quantization fp8,
// except the LM head). Layers stacked into one product must agree.
func (m *Model) linearKind(modules []string, online bool) (linearKind, error) {
	c := m.cfg
	if quantizesLinears(c) {
		var quantized, plain []string
		var static []bool
		for _, mod := range modules {
			s, ok, err := c.Quantization.Scheme(mod)
			if err != nil {
				return 0, err
			}
			if ok && s.Block == [2]int{} {
				quantized = append(quantized, mod)
				static = append(static, s.StaticInput)
			} else {
				plain = append(plain, mod)
			}
		}
		switch {
		case len(quantized) > 0 && len(plain) > 0:
			return 0, fmt.Errorf("layer %s is FP8 but %s is not: gollm runs them as one product: %w", quantized[0], plain[0], weights.ErrUnsupported)
		case len(quantized) > 0:
			for i := range static {
				if static[i] != static[0] {
					return 0, fmt.Errorf("layers %s and %s share an input but one scales it statically and the other per token: %w",
						quantized[0], quantized[i], weights.ErrUnsupported)
				}
			}
			return linearCheckpoint, nil
		}
		return linearFloat, nil
	}
	if online && !(len(modules) == 1 && modules[0] == strings.TrimSuffix(c.LMHeadTensor(), ".weight")) {
		return linearOnline, nil
	}
	return linearFloat, nil
}

// UsesFP8Weights reports whether a model of cfg loaded with Options.Quantization quantization runs FP8
// Linear layers: its checkpoint's, or with "fp8" its float ones quantized at load.
func UsesFP8Weights(cfg *weights.Config, quantization string) bool {
	return len(fp8WeightNames(cfg, quantization)) > 0
}

// fp8WeightNames returns the weights (tensor names) of the Linear layers that a model of cfg loaded with
// Options.Quantization quantization runs in FP8: those the checkpoint quantizes, or with "fp8" on a
// checkpoint that quantizes none (a float one, or one with KV scales only) all but the LM head's.
func fp8WeightNames(cfg *weights.Config, quantization string) map[string]bool {
	names := map[string]bool{}
	checkpoint := quantizesLinears(cfg)
	for _, mod := range cfg.LinearModules() {
		name := mod + ".weight"
		if checkpoint {
			if s, ok, _ := cfg.Quantization.Scheme(mod); ok && s.Block == [2]int{} {
				names[name] = true
			}
		} else if quantization == QuantizationFP8 && name != cfg.LMHeadTensor() {
			names[name] = true
		}
	}
	return names
}

// dequantizingGetter returns get with the weights of cfg's block-wise FP8 layers (FP8Scheme.Block)
// read as their dequantized values (weights.DequantizeFP8, F32), so that everything after it (the
// shards of tensor parallelism, the finiteness check, the upload in the model's dtype) sees a float
// checkpoint: gollm's FP8 products take one weight scale per row, not one per block. Other tensors
// pass through. It logs that it does so (log nil: slog's default).
func dequantizingGetter(cfg *weights.Config, get tensorGetter, log *slog.Logger) tensorGetter {
	if cfg.Quantization == nil {
		return get
	}
	blocks := map[string]string{} // weight → module
	var block [2]int
	for _, mod := range cfg.LinearModules() {
		if s, ok, _ := cfg.Quantization.Scheme(mod); ok && s.Block != [2]int{} {
			blocks[mod+".weight"], block = mod, s.Block
		}
	}
	if len(blocks) == 0 {
		return get
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn("block-wise FP8 weights run dequantized, as float layers in the model's dtype",
		"layers", len(blocks), "block", fmt.Sprintf("%d×%d", block[0], block[1]))
	return func(name string) (*weights.Tensor, error) {
		mod, ok := blocks[name]
		if !ok {
			return get(name)
		}
		lin, err := weights.ReadFP8Linear(cfg, get, mod)
		if err != nil {
			return nil, err
		}
		return weights.DequantizeFP8(lin), nil
	}
}

// quantizesLinears reports whether cfg's checkpoint holds FP8 Linear layers (a quantization_config with
// a kv_cache_scheme alone quantizes none).
func quantizesLinears(cfg *weights.Config) bool {
	if cfg.Quantization == nil {
		return false
	}
	for _, mod := range cfg.LinearModules() {
		if _, ok, _ := cfg.Quantization.Scheme(mod); ok {
			return true
		}
	}
	return false
}

// checkpointFP8 reads the FP8 Linear layers modules from the checkpoint and stacks them into one
// FP8Weight of rows × cols: codes and row scales one after the other, and the largest of their static
// input scales (the input is one tensor; vLLM takes the maximum too). With checkValues it refuses NaN
// codes (0x7F, 0xFF).
func (m *Model) checkpointFP8(get tensorGetter, modules []string, rows, cols int, checkValues bool) (*FP8Weight, error) {
	out := &FP8Weight{Name: modules[0] + ".weight", Rows: rows, Cols: cols}
	if len(modules) > 1 {
		out.Name += "+"
	}
	for _, mod := range modules {
		lin, err := weights.ReadFP8Linear(m.cfg, get, mod)
		if err != nil {
			return nil, err
		}
		if checkValues {
			if err := checkFinite(lin.Weight); err != nil {
				return nil, err
			}
		}
		if lin.Weight.Shape[1] != cols {
			return nil, fmt.Errorf("tensor %q: shape %v, want %d columns", lin.Weight.Name, lin.Weight.Shape, cols)
		}
		out.Codes = append(out.Codes, lin.Weight.Data...)
		out.Scales = append(out.Scales, lin.Scales...)
		out.InputScale = max(out.InputScale, lin.InputScale)
	}
	if len(out.Scales) != rows {
		return nil, fmt.Errorf("tensor %q: %d rows, want %d", out.Name, len(out.Scales), rows)
	}
	return out, nil
}

// quantizeFP8 quantizes the float matrix t at load as Options.Quantization fp8 does: row o's scale is
// max(max_i |w[o][i]| / 448, 1/(448·512)) and its codes e4m3(w[o][i] / scale), saturating, all in
// float32 (as quantizing the checkpoint's values in PyTorch with w.float() / scale gives); the input is
// scaled per token at run time.
func quantizeFP8(t *weights.Tensor) *FP8Weight {
	rows, cols := t.Shape[0], t.Shape[1]
	w := &FP8Weight{Name: t.Name, Rows: rows, Cols: cols, Codes: make([]byte, rows*cols), Scales: make([]float32, rows)}
	size := t.DType.Size()
	// Rows are independent: bands of them in parallel (a Llama-3-8B takes seconds, not a minute).
	parallelBands(rows, rows*cols, runtime.GOMAXPROCS(0), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			row := (&weights.Tensor{DType: t.DType, Shape: []int{cols}, Data: t.Data[o*cols*size : (o+1)*cols*size]}).Float32()
			var amax float32
			for _, x := range row {
				amax = max(amax, abs32(x))
			}
			s := max(amax/dtype.E4M3Max, fp8MinScale)
			w.Scales[o] = s
			dtype.EncodeE4M3Sat(w.Codes[o*cols:(o+1)*cols], row, s)
		}
	})
	return w
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// kvScales reads each layer's K and V scales of an FP8 KV cache from the checkpoint (weights.
// ReadKVScales); a layer without them gets 1, and log is told once how many layers that is.
func kvScales(cfg *weights.Config, get tensorGetter, log *slog.Logger) ([]KVScale, error) {
	scales := make([]KVScale, cfg.NumHiddenLayers)
	missing := 0
	for l := range scales {
		scales[l] = KVScale{K: 1, V: 1}
		if cfg.Quantization == nil {
			missing++
			continue
		}
		k, v, ok, err := weights.ReadKVScales(cfg, get, l)
		if err != nil {
			return nil, err
		}
		if !ok {
			missing++
			continue
		}
		scales[l] = KVScale{K: k, V: v}
	}
	if missing > 0 {
		if log == nil {
			log = slog.Default()
		}
		log.Warn("fp8 KV cache: the checkpoint has no K/V scales (k_scale, v_scale); using 1.0, so values beyond ±448 saturate",
			"layers", missing, "of", cfg.NumHiddenLayers)
	}
	return scales, nil
}

// fp8Matrix is the CPU backend's FP8 Linear weight: the codes as uploaded (row-major [out][in]), one
// scale per output row, and the input's static scale (0: per token).
type fp8Matrix struct {
	codes      []byte
	scales     []float32
	inputScale float32
}

// quantizeRows writes x's rows [rows][in] quantized to e4m3 into xq (as the float32 values of the
// codes) and their scales into sx (FP8Weight's s[r] and xq[r][i]).
func quantizeRows(xq, sx, x []float32, rows, in int, inputScale float32) {
	for r := range rows {
		row := x[r*in : (r+1)*in]
		s := inputScale
		if s == 0 {
			var amax float32
			for _, v := range row {
				amax = max(amax, abs32(v)) // a NaN makes amax, and s, NaN
			}
			s = max(amax/dtype.E4M3Max, fp8MinScale)
		}
		sx[r] = s
		q := xq[r*in : (r+1)*in]
		for i, v := range row {
			q[i] = dtype.E4M3ToF32(dtype.F32ToE4M3Sat(v / s))
		}
	}
}

// matMulFP8 is the product with an FP8 weight: xq and sx are the quantized input rows and their
// scales (quantizeRows). Each band decodes four weight rows at a time to float32 once and meets every
// input row with them, as matMulBF16 does for prefill.
func matMulFP8(dst, xq, sx []float32, w *fp8Matrix, rows, in, out, workers int) {
	parallelBands(out, rows*in*out, workers, func(lo, hi int) {
		scratch := make([]float32, quad*in)
		o := lo
		for ; o+quad <= hi; o += quad {
			dtype.DecodeE4M3(scratch, w.codes[o*in:(o+quad)*in], 1)
			f0, f1, f2, f3 := scratch[:in], scratch[in:2*in], scratch[2*in:3*in], scratch[3*in:4*in]
			ws := w.scales[o : o+quad]
			for r := range rows {
				s0, s1, s2, s3 := dot4(f0, f1, f2, f3, xq[r*in:(r+1)*in])
				d := dst[r*out+o : r*out+o+quad]
				d[0], d[1], d[2], d[3] = s0*(sx[r]*ws[0]), s1*(sx[r]*ws[1]), s2*(sx[r]*ws[2]), s3*(sx[r]*ws[3])
			}
		}
		for ; o < hi; o++ {
			row := scratch[:in]
			dtype.DecodeE4M3(row, w.codes[o*in:(o+1)*in], 1)
			for r := range rows {
				dst[r*out+o] = dot(row, xq[r*in:(r+1)*in]) * (sx[r] * w.scales[o])
			}
		}
	})
}

// kvFP8 reports whether s's KV pages are FP8 (KVCacheDType), after checking their scales: one pair a
// layer, each positive and finite. Any other KV dtype is an error.
func (s *Shape) kvFP8() (bool, error) {
	switch s.KVCacheDType {
	case "":
		return false, nil
	case KVCacheFP8:
		if len(s.KVScales) != s.NumLayers {
			return false, fmt.Errorf("fp8 KV cache: %d scales for %d layers", len(s.KVScales), s.NumLayers)
		}
		for l, sc := range s.KVScales {
			if !(sc.K > 0 && sc.V > 0) || math.IsInf(float64(sc.K), 0) || math.IsInf(float64(sc.V), 0) {
				return false, fmt.Errorf("fp8 KV cache: layer %d: scales %+v", l, sc)
			}
		}
		return true, nil
	}
	return false, fmt.Errorf("KV cache dtype %q", s.KVCacheDType)
}

// The forms of the quantizing producers (NormE4M3, SwiGLUE4M3) besides a register shape (an index of
// fp8RowShapes): the loop kernels and the staged kernels (kernels/fp8.cu).
const (
	fp8FormLoop   = -1
	fp8FormStaged = -2
)

// fp8StageThreads is STAGE_THREADS of kernels/fp8.cu: the staged kernels' block.
const fp8StageThreads = 512

// fp8FusedForm is the form a quantizing producer runs for rows of cols values where a block may hold
// stageMax bytes of shared memory: a register shape where one holds the row; else staged where the row
// fits stageMax as float32; else the loops, which compute each value twice. staged < 0 never picks the
// staged form, > 0 picks it wherever it holds the row (gemvTuning.FP8Staged, and fp8StagedIn16): staging
// rows a register shape holds was measured slower in the decode step and no faster in the prefill, but
// for the SwiGLU over bfloat16 sums at prefill sizes (docs/bench/fp8-h200.md).
func fp8FusedForm(cols, stageMax, staged int) int {
	shape, regs := fp8RowShape(cols)
	fits := fp8StagedFits(cols, stageMax)
	switch {
	case fits && staged > 0, fits && staged == 0 && !regs:
		return fp8FormStaged
	case regs:
		return shape
	}
	return fp8FormLoop
}

// fp8StagedIn16 is the staged argument of fp8FusedForm for a SwiGLU of rows rows reading bfloat16
// sums (opPlan.fp8In16) under tuning staged (gemvTuning.FP8Staged): staged wherever it holds the row
// from more than fp8StageIn16Rows rows, unless the tuning says otherwise. Its staged kernel, two blocks
// an SM where the register form holds one, was measured faster there (docs/bench/fp8-h200.md).
func fp8StagedIn16(rows, staged int) int {
	if staged == 0 && rows > fp8StageIn16Rows {
		return 1
	}
	return staged
}

// fp8StageIn16Rows is the most rows of a SwiGLU over bfloat16 sums that keep the default form: the
// decode steps', whose one wave of rows gains nothing from a second block an SM.
const fp8StageIn16Rows = 64

// fp8StagedFits reports whether the staged kernels hold rows of cols values in stageMax bytes of shared
// memory: a multiple of 4 values, each a float32.
func fp8StagedFits(cols, stageMax int) bool { return cols > 0 && cols%4 == 0 && 4*cols <= stageMax }

// fp8RowShapes are the shapes of the quantizing kernels' register forms (kernels/fp8.cu, FP8_ROWS), in
// its order: threads a block (one row) × float4 groups a thread.
var fp8RowShapes = [...]struct{ threads, groups int }{{256, 1}, {256, 2}, {256, 4}, {256, 8}, {512, 8}}

// fp8RowShape is the register form for rows of cols values (an index of fp8RowShapes): the first shape
// that holds the row; ok is false where cols is not a multiple of 4 or the row fits none (fp8FusedForm
// then picks the staged or the loop kernels).
func fp8RowShape(cols int) (shape int, ok bool) {
	if cols <= 0 || cols%4 != 0 {
		return 0, false
	}
	for i, s := range fp8RowShapes {
		if cols/4 <= s.threads*s.groups {
			return i, true
		}
	}
	return 0, false
}
