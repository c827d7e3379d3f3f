package model

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// randomModel is an in-memory checkpoint with float32 weights drawn from a seeded generator.
type randomModel struct {
	cfg     *weights.Config
	tensors map[string]*weights.Tensor
}

func (r *randomModel) get(name string) (*weights.Tensor, error) {
	t, ok := r.tensors[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	return t, nil
}

// newRandomModel draws every parameter of cfg (the tensors weights.TensorShapes lists): norm gains
// near 1 (stored near 0 where the family's norms add 1), biases N(0, 0.1²), matrices N(0, 0.15²), with a
// larger scale for the embeddings and the LM head so that logits spread out. A LLaMA model's tensors are
// drawn first, in the order they always were (tests calibrated on those models keep them), then the
// tensors other families add, in name order.
func newRandomModel(cfg *weights.Config, dt weights.DType, seed uint64) *randomModel {
	rng := rand.New(rand.NewPCG(seed, 7))
	r := &randomModel{cfg: cfg, tensors: map[string]*weights.Tensor{}}
	c := *cfg
	c.HeadDim = headDim(cfg)
	shapes := weights.TensorShapes(&c)
	draw := func(name string) {
		shape, ok := shapes[name]
		if !ok || r.tensors[name] != nil {
			return
		}
		std, mean := 0.15, 0.0
		switch {
		case strings.HasSuffix(name, "norm.weight"):
			std, mean = 0.2, 1-cfg.NormOffset
		case strings.HasSuffix(name, ".bias"):
			std = 0.1
		case name == c.Tensor("embed_tokens.weight") || name == c.LMHeadTensor():
			std = 0.5
		}
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + std*rng.NormFloat64())
		}
		r.tensors[name] = encodeTensor(name, dt, shape, v)
	}
	draw(c.Tensor("embed_tokens.weight"))
	for l := range cfg.NumHiddenLayers {
		for _, suffix := range []string{"input_layernorm.weight", "post_attention_layernorm.weight",
			"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
			"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"} {
			draw(c.LayerTensor(l, suffix))
		}
	}
	draw(c.Tensor("norm.weight"))
	draw(c.LMHeadTensor())
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		draw(name)
	}
	return r
}

// encodeTensor stores v in dtype dt (bf16 by truncation, which is fine for random data).
func encodeTensor(name string, dt weights.DType, shape []int, v []float32) *weights.Tensor {
	t := &weights.Tensor{Name: name, DType: dt, Shape: shape}
	switch dt {
	case weights.DTypeF32:
		t.Data = float32Bytes(v)
	case weights.DTypeBF16:
		t.Data = make([]byte, 2*len(v))
		for i, x := range v {
			u := math.Float32bits(x) >> 16
			t.Data[2*i], t.Data[2*i+1] = byte(u), byte(u>>8)
		}
	default:
		panic("encodeTensor: unsupported dtype " + dt.String())
	}
	return t
}

func tinyConfig() *weights.Config {
	return &weights.Config{
		Architecture: "LlamaForCausalLM", VocabSize: 97, HiddenSize: 48, IntermediateSize: 75,
		NumHiddenLayers: 2, NumAttentionHeads: 6, NumKeyValueHeads: 2, HeadDim: 8,
		MaxPositionEmbeddings: 512, RMSNormEps: 1e-5, RopeTheta: 10000,
		RopeScaling: weights.RopeScaling{Type: "default"}, DType: weights.DTypeF32,
	}
}

// reference computes the logits of every position of tokens with a dense float64 forward pass that
// shares no code with the backend (its own RMSNorm, RoPE from float64 frequencies, softmax attention),
// written from transformers' modeling files of each family: biases, q/k norms, Gemma's (1 + w) norms
// around both sublayers, GeGLU, scaled embeddings and attention, sliding windows, a rotary table per
// layer type and the final soft cap, as the config says.
func reference(t *testing.T, r *randomModel, tokens []int32) [][]float64 {
	t.Helper()
	return referenceWith(t, r, tokens, refHooks{})
}

// refHooks change what reference computes: input, when not nil, replaces the input x of the Linear
// layer module (a layer's "….self_attn.q_proj", "lm_head") before the product (an FP8 layer quantizes
// it); kv, when not nil, replaces layer l's k and v of a position, after the rotary embedding, before
// attention reads them (an FP8 KV cache stores them rounded).
type refHooks struct {
	input func(module string, x []float64) []float64
	kv    func(l int, k, v []float64)
}

// referenceWith is reference with hooks.
func referenceWith(t *testing.T, r *randomModel, tokens []int32, hooks refHooks) [][]float64 {
	t.Helper()
	c := r.cfg
	h, d, inter := c.HiddenSize, headDim(c), c.IntermediateSize
	hq, hkv := c.NumAttentionHeads, c.NumKeyValueHeads
	w := func(name string) []float64 {
		tn, err := r.get(name)
		if err != nil {
			t.Fatal(err)
		}
		f := tn.Float32()
		out := make([]float64, len(f))
		for i, x := range f {
			out[i] = float64(x)
		}
		return out
	}
	lw := func(l int, suffix string) []float64 { return w(c.LayerTensor(l, suffix)) }
	linear := func(x []float64, m []float64, rows int) []float64 { // m [rows][len(x)]
		y := make([]float64, rows)
		for o := range rows {
			for i, xi := range x {
				y[o] += m[o*len(x)+i] * xi
			}
		}
		return y
	}
	// proj is layer l's Linear layer name (e.g. "self_attn.q_proj") applied to x, through hooks.input.
	proj := func(x []float64, l int, name string, rows int) []float64 {
		if hooks.input != nil {
			x = hooks.input(c.LayerTensor(l, name), x)
		}
		return linear(x, lw(l, name+".weight"), rows)
	}
	addBias := func(y []float64, l int, proj string) {
		for i, b := range lw(l, "self_attn."+proj+".bias") {
			y[i] += b
		}
	}
	norm := func(x, g []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+c.RMSNormEps)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * inv * (c.NormOffset + g[i])
		}
		return y
	}
	invFreq := func(theta float64, sc weights.RopeScaling) []float64 {
		f := make([]float64, d/2)
		for i := range f {
			f[i] = math.Pow(theta, -float64(2*i)/float64(d))
			switch sc.Type {
			case "", "default":
			case "linear":
				f[i] /= sc.Factor
			default:
				t.Fatalf("reference: rope type %q", sc.Type)
			}
		}
		return f
	}
	rope := func(v []float64, pos int, inv []float64) {
		for i, f := range inv {
			cs, sn := math.Cos(f*float64(pos)), math.Sin(f*float64(pos))
			a, b := v[i], v[i+d/2]
			v[i], v[i+d/2] = a*cs-b*sn, b*cs+a*sn
		}
	}
	scale := 1 / math.Sqrt(float64(d))
	if c.QueryPreAttnScalar > 0 {
		scale = 1 / math.Sqrt(c.QueryPreAttnScalar)
	}
	emb := w(c.Tensor("embed_tokens.weight"))
	embScale := 1.0
	if c.EmbedScale {
		embScale = float64(float32(math.Sqrt(float64(h))))
	}
	n := len(tokens)
	x := make([][]float64, n)
	for p, tok := range tokens {
		x[p] = make([]float64, h)
		for i, e := range emb[int(tok)*h : int(tok+1)*h] {
			x[p][i] = e * embScale
		}
	}
	for l := range c.NumHiddenLayers {
		inv := invFreq(c.LayerRope(l))
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for p := range n {
			xn := norm(x[p], lw(l, "input_layernorm.weight"))
			q[p] = proj(xn, l, "self_attn.q_proj", hq*d)
			k[p] = proj(xn, l, "self_attn.k_proj", hkv*d)
			v[p] = proj(xn, l, "self_attn.v_proj", hkv*d)
			if c.QKVBias {
				addBias(q[p], l, "q_proj")
				addBias(k[p], l, "k_proj")
				addBias(v[p], l, "v_proj")
			}
			for hh := range hq {
				if c.QKNorm {
					copy(q[p][hh*d:(hh+1)*d], norm(q[p][hh*d:(hh+1)*d], lw(l, "self_attn.q_norm.weight")))
				}
				rope(q[p][hh*d:(hh+1)*d], p, inv)
			}
			for hh := range hkv {
				if c.QKNorm {
					copy(k[p][hh*d:(hh+1)*d], norm(k[p][hh*d:(hh+1)*d], lw(l, "self_attn.k_norm.weight")))
				}
				rope(k[p][hh*d:(hh+1)*d], p, inv)
			}
			if hooks.kv != nil {
				hooks.kv(l, k[p], v[p])
			}
		}
		for p := range n {
			first := 0
			if win := c.LayerWindow(l); win > 0 {
				first = max(0, p-win+1)
			}
			attn := make([]float64, hq*d)
			for hh := range hq {
				kh := hh / (hq / hkv)
				scores := make([]float64, p+1)
				maxS := math.Inf(-1)
				for j := first; j <= p; j++ {
					for i := range d {
						scores[j] += q[p][hh*d+i] * k[j][kh*d+i]
					}
					scores[j] *= scale
					maxS = math.Max(maxS, scores[j])
				}
				var sum float64
				for j := first; j <= p; j++ {
					scores[j] = math.Exp(scores[j] - maxS)
					sum += scores[j]
				}
				for j := first; j <= p; j++ {
					for i := range d {
						attn[hh*d+i] += scores[j] / sum * v[j][kh*d+i]
					}
				}
			}
			o := proj(attn, l, "self_attn.o_proj", h)
			if c.OBias {
				addBias(o, l, "o_proj")
			}
			mlpNorm := "post_attention_layernorm.weight"
			if c.SandwichNorm {
				o = norm(o, lw(l, "post_attention_layernorm.weight"))
				mlpNorm = "pre_feedforward_layernorm.weight"
			}
			for i := range h {
				x[p][i] += o[i]
			}
			xn := norm(x[p], lw(l, mlpNorm))
			gate := proj(xn, l, "mlp.gate_proj", inter)
			up := proj(xn, l, "mlp.up_proj", inter)
			for i, g := range gate {
				if c.Activation() == weights.ActGELUTanh {
					gate[i] = 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))) * up[i]
				} else {
					gate[i] = g / (1 + math.Exp(-g)) * up[i]
				}
			}
			down := proj(gate, l, "mlp.down_proj", h)
			if c.SandwichNorm {
				down = norm(down, lw(l, "post_feedforward_layernorm.weight"))
			}
			for i := range h {
				x[p][i] += down[i]
			}
		}
	}
	head := emb
	if !c.TieWordEmbeddings {
		head = w(c.LMHeadTensor())
	}
	logits := make([][]float64, n)
	for p := range n {
		xn := norm(x[p], w(c.Tensor("norm.weight")))
		if hooks.input != nil && !c.TieWordEmbeddings {
			xn = hooks.input(strings.TrimSuffix(c.LMHeadTensor(), ".weight"), xn)
		}
		logits[p] = linear(xn, head, c.VocabSize)
		if sc := c.FinalLogitSoftcap; sc > 0 {
			for i, z := range logits[p] {
				logits[p][i] = sc * math.Tanh(z/sc)
			}
		}
	}
	return logits
}

// pager hands out physical blocks in a shuffled order and builds steps, as a block pool would: a block
// table per KV group, and the pages of a sliding group given back (their entries −1, the blocks reused)
// once the sequence's next query cannot see them.
type pager struct {
	blockSize int
	windows   []int // per KV group
	free      []int32
	tables    map[int][][]int32 // sequence id → block table per group
	lens      map[int]int       // sequence id → tokens in the cache
}

func newPager(numBlocks, blockSize int, rng *rand.Rand) *pager {
	p := &pager{blockSize: blockSize, windows: []int{0}, tables: map[int][][]int32{}, lens: map[int]int{}}
	for _, b := range rng.Perm(numBlocks) {
		p.free = append(p.free, int32(b))
	}
	return p
}

// newModelPager is newPager for m's blocks and KV groups.
func newModelPager(m *Model, rng *rand.Rand) *pager {
	p := newPager(m.NumBlocks(), m.BlockSize(), rng)
	p.windows = m.KVLayout().Windows
	return p
}

// chunk is part of one step: tokens appended to sequence seq, and whether its last row's logits are
// wanted.
type chunk struct {
	seq    int
	tokens []int32
}

// step builds the Step that appends the chunks, allocating blocks as needed (and first giving back the
// sliding groups' pages behind every window); LogitRows asks for the last row of every chunk.
func (p *pager) step(chunks ...chunk) *Step {
	s := &Step{QueryStart: []int32{0}, GroupBlockTables: make([][][]int32, len(p.windows)-1)}
	for _, c := range chunks {
		start := p.lens[c.seq]
		if p.tables[c.seq] == nil {
			p.tables[c.seq] = make([][]int32, len(p.windows))
		}
		tables := p.tables[c.seq]
		for g, w := range p.windows {
			for i := 0; w > 0 && (i+1)*p.blockSize <= start-w+1; i++ {
				if tables[g][i] >= 0 { // reused first: a read of a page given back reads another's K/V
					p.free = append([]int32{tables[g][i]}, p.free...)
					tables[g][i] = -1
				}
			}
			for len(tables[g])*p.blockSize < start+len(c.tokens) {
				tables[g] = append(tables[g], p.free[0])
				p.free = p.free[1:]
			}
		}
		for i, tok := range c.tokens {
			pos := start + i
			s.Tokens = append(s.Tokens, tok)
			s.Positions = append(s.Positions, int32(pos))
			s.SlotMapping = append(s.SlotMapping, tables[0][pos/p.blockSize]*int32(p.blockSize)+int32(pos%p.blockSize))
		}
		p.lens[c.seq] = start + len(c.tokens)
		s.QueryStart = append(s.QueryStart, int32(len(s.Tokens)))
		s.ContextLens = append(s.ContextLens, int32(p.lens[c.seq]))
		s.BlockTables = append(s.BlockTables, tables[0])
		for g := 1; g < len(p.windows); g++ {
			s.GroupBlockTables[g-1] = append(s.GroupBlockTables[g-1], tables[g])
		}
		s.LogitRows = append(s.LogitRows, int32(len(s.Tokens)-1))
	}
	if len(p.windows) == 1 {
		s.GroupBlockTables = nil
	}
	return s
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 11)) }

func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	return out
}

func maxAbsDiff(got []float32, want []float64) float64 {
	var worst float64
	for i := range want {
		diff := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(diff) {
			return math.Inf(1)
		}
		worst = math.Max(worst, diff)
	}
	return worst
}

// TestForwardMatchesReference runs three sequences through mixed steps (prefill chunks of different
// lengths beside decode tokens, shuffled pages, a page size that prompts straddle) and compares every
// logits row asked for with the float64 dense reference.
func TestForwardMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*weights.Config)
		dt   weights.DType
	}{
		{"gqa3", func(*weights.Config) {}, weights.DTypeF32},
		{"mha_tied", func(c *weights.Config) { c.NumKeyValueHeads = 6; c.TieWordEmbeddings = true }, weights.DTypeF32},
		{"mqa_bf16", func(c *weights.Config) { c.NumKeyValueHeads = 1 }, weights.DTypeBF16},
		{"headdim16", func(c *weights.Config) { c.HeadDim = 16; c.NumAttentionHeads = 4 }, weights.DTypeF32},
		{"llama_attention_bias", func(c *weights.Config) { c.QKVBias, c.OBias = true, true }, weights.DTypeF32},
		{"qwen2_window", func(c *weights.Config) {
			c.QKVBias = true
			c.LayerTypes, c.SlidingWindow = []string{weights.FullAttention, weights.SlidingAttention}, 5
		}, weights.DTypeBF16},
		{"qwen3", func(c *weights.Config) { c.QKNorm, c.HeadDim, c.NumAttentionHeads = true, 16, 4 }, weights.DTypeF32},
		{"mistral_window_1", func(c *weights.Config) {
			c.LayerTypes, c.SlidingWindow = []string{weights.SlidingAttention, weights.SlidingAttention}, 1
		}, weights.DTypeF32},
		{"gemma3", func(c *weights.Config) {
			c.NumHiddenLayers = 3
			c.LayerTypes = []string{weights.SlidingAttention, weights.FullAttention, weights.SlidingAttention}
			c.SlidingWindow, c.LocalRopeTheta, c.LocalRopeScaling = 6, 100, weights.RopeScaling{Type: "default"}
			c.RopeScaling = weights.RopeScaling{Type: "linear", Factor: 4}
			c.HiddenAct, c.QKNorm, c.NormOffset, c.SandwichNorm, c.EmbedScale = weights.ActGELUTanh, true, 1, true, true
			c.QueryPreAttnScalar, c.FinalLogitSoftcap, c.TieWordEmbeddings = 24, 5, true
		}, weights.DTypeF32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig()
			tc.cfg(cfg)
			r := newRandomModel(cfg, tc.dt, 1)
			m, err := load(cfg, r.get, Options{NumBlocks: 64, BlockSize: 4}, NewCPUBackend)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			rng := rand.New(rand.NewPCG(2, 3))
			p := newModelPager(m, rng)
			prompts := [][]int32{randomTokens(rng, 9, cfg.VocabSize), randomTokens(rng, 1, cfg.VocabSize),
				randomTokens(rng, 21, cfg.VocabSize)}
			full := make([][]int32, len(prompts)) // each sequence's tokens so far
			// Steps: prefill of 0 and 1 together; 2's first chunk beside decodes of 0 and 1; 2's second
			// chunk; then decodes of all three.
			var plan [][]chunk
			plan = append(plan, []chunk{{0, prompts[0]}, {1, prompts[1]}})
			plan = append(plan, []chunk{{0, nil}, {2, prompts[2][:8]}, {1, nil}})
			plan = append(plan, []chunk{{2, prompts[2][8:]}})
			for range 4 {
				plan = append(plan, []chunk{{1, nil}, {2, nil}, {0, nil}})
			}
			for i, chunks := range plan {
				for j := range chunks {
					if chunks[j].tokens == nil { // a decode: feed a random token
						chunks[j].tokens = randomTokens(rng, 1, cfg.VocabSize)
					}
					full[chunks[j].seq] = append(full[chunks[j].seq], chunks[j].tokens...)
				}
				logits, err := m.Forward(p.step(chunks...))
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				for j, c := range chunks {
					want := reference(t, r, full[c.seq])
					if diff := maxAbsDiff(logits[j], want[len(want)-1]); diff > 1e-4 {
						t.Errorf("step %d, sequence %d (%d tokens): max abs diff %g", i, c.seq, len(full[c.seq]), diff)
					}
				}
			}
		})
	}
}

func TestForwardRejectsInvalidSteps(t *testing.T) {
	cfg := tinyConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	m, err := load(cfg, r.get, Options{NumBlocks: 8, BlockSize: 4}, NewCPUBackend)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	valid := func() *Step {
		return &Step{
			Tokens: []int32{5, 6, 7}, Positions: []int32{0, 1, 2}, SlotMapping: []int32{12, 13, 14},
			QueryStart: []int32{0, 3}, ContextLens: []int32{3}, BlockTables: [][]int32{{3}}, LogitRows: []int32{2},
		}
	}
	if _, err := m.Forward(valid()); err != nil {
		t.Fatalf("valid step: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Step)
	}{
		{"no tokens", func(s *Step) { *s = Step{QueryStart: []int32{0}} }},
		{"short positions", func(s *Step) { s.Positions = s.Positions[:2] }},
		{"token out of vocab", func(s *Step) { s.Tokens[1] = 97 }},
		{"negative token", func(s *Step) { s.Tokens[1] = -1 }},
		{"query start not zero", func(s *Step) { s.QueryStart[0] = 1 }},
		{"query start short of T", func(s *Step) { s.QueryStart[1] = 2 }},
		{"context shorter than query", func(s *Step) { s.ContextLens[0] = 2 }},
		{"block table too short", func(s *Step) { s.ContextLens[0] = 5; s.Positions = []int32{2, 3, 4} }},
		{"block out of range", func(s *Step) { s.BlockTables[0][0] = 8 }},
		{"wrong position", func(s *Step) { s.Positions[2] = 7 }},
		{"slot off its block table", func(s *Step) { s.SlotMapping[0] = 0 }},
		{"logit row out of range", func(s *Step) { s.LogitRows[0] = 3 }},
		{"missing block table", func(s *Step) { s.BlockTables = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := valid()
			tc.mutate(s)
			if _, err := m.Forward(s); !errors.Is(err, ErrInvalidStep) {
				t.Fatalf("Forward: got %v, want ErrInvalidStep", err)
			}
		})
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(valid()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Forward after Close: got %v, want ErrClosed", err)
	}
}

func TestLoadRejectsBadShapes(t *testing.T) {
	cfg := tinyConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	r.tensors["model.layers.1.mlp.up_proj.weight"].Shape = []int{cfg.IntermediateSize + 1, cfg.HiddenSize}
	if _, err := load(cfg, r.get, Options{NumBlocks: 8}, NewCPUBackend); err == nil {
		t.Fatal("load accepted a wrong up_proj shape")
	}
	delete(r.tensors, "lm_head.weight")
	if _, err := load(cfg, r.get, Options{NumBlocks: 8}, NewCPUBackend); err == nil {
		t.Fatal("load accepted a missing lm_head")
	}
	if _, err := load(tinyConfig(), newRandomModel(tinyConfig(), weights.DTypeF32, 1).get, Options{}, NewCPUBackend); err == nil {
		t.Fatal("load accepted NumBlocks 0")
	}
}

// TestLoadContextCancel: a context that ends before or during the upload stops it with the context's
// error, and the backend is closed.
func TestLoadContextCancel(t *testing.T) {
	for _, after := range []int{0, 1, 5} {
		t.Run(fmt.Sprintf("after %d tensors", after), func(t *testing.T) {
			cfg := tinyConfig()
			r := newRandomModel(cfg, weights.DTypeF32, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := 0
			get := func(name string) (*weights.Tensor, error) {
				if got == after {
					cancel()
				}
				got++
				return r.get(name)
			}
			if after == 0 {
				cancel()
			}
			var backend *closeCounter
			m, err := loadContext(ctx, cfg, get, Options{NumBlocks: 8}, func(s Shape) (Backend, error) {
				b, err := NewCPUBackend(s)
				backend = &closeCounter{Backend: b}
				return backend, err
			}, false)
			if !errors.Is(err, context.Canceled) || m != nil {
				t.Fatalf("got %v, %v; want context.Canceled", m, err)
			}
			if got > after+1 {
				t.Errorf("read %d tensors after the context ended at %d", got, after)
			}
			if backend != nil && backend.closes != 1 {
				t.Errorf("backend closed %d times, want once", backend.closes)
			}
		})
	}
}

// closeCounter counts the Close calls of the Backend it wraps.
type closeCounter struct {
	Backend
	closes int
}

func (c *closeCounter) Close() error {
	c.closes++
	return c.Backend.Close()
}

func TestKVBytesPerBlock(t *testing.T) {
	cfg := tinyConfig()
	// 2 layers × (K and V) × 16 tokens × 2 KV heads × 8 dims × 4 bytes.
	if got, want := KVBytesPerBlock(cfg, 16, ""), 2*2*16*2*8*4; got != want {
		t.Fatalf("KVBytesPerBlock = %d, want %d", got, want)
	}
}

// TestGraphBucket checks the decode batches' CUDA-graph buckets and their smallest batches: powers of two up to 32, multiples of 8
// past it, never below the batch, and within 8 sequences of it past 32 (so that the attention plan made
// for the bucket fits the batches it serves).
func TestGraphBucket(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{1, 1}, {2, 2}, {3, 4}, {5, 8}, {9, 16}, {17, 32}, {32, 32}, {33, 40}, {34, 40}, {40, 40}, {41, 48},
		{64, 64}, {65, 72}, {255, 256}, {256, 256},
	} {
		if got := graphBucket(tc.n); got != tc.want {
			t.Errorf("graphBucket(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	for n := 1; n <= 256; n++ {
		got := graphBucket(n)
		if got < n || n > 32 && (got%8 != 0 || got-n >= 8) {
			t.Fatalf("graphBucket(%d) = %d", n, got)
		}
		// graphBucketLow is the smallest batch of the bucket.
		if low := graphBucketLow(got); low > n || graphBucket(low-1) == got && low > 1 {
			t.Fatalf("graphBucketLow(%d) = %d for batch %d", got, low, n)
		}
	}
}

// TestKVLayout checks the KV groups of published shapes and of small mixed layouts: groups as large as
// the smaller kind, groups without a window first, page arrays by position in the group.
func TestKVLayout(t *testing.T) {
	types := func(n int, sliding func(int) bool) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = weights.FullAttention
			if sliding(i) {
				out[i] = weights.SlidingAttention
			}
		}
		return out
	}
	gemma := func(i int) bool { return (i+1)%6 != 0 }
	for _, tc := range []struct {
		name           string
		layers, window int
		sliding        func(int) bool
		windows        []int
		slots          int
	}{
		{"llama", 32, 0, func(int) bool { return false }, []int{0}, 32},
		{"mistral-7b-v0.1: every layer slides", 32, 4096, func(int) bool { return true }, []int{4096}, 32},
		{"gemma-3-12b", 48, 1024, gemma, []int{0, 1024, 1024, 1024, 1024, 1024}, 8},
		{"gemma-3-4b", 34, 1024, gemma, []int{0, 1024, 1024, 1024, 1024, 1024, 1024}, 5},
		{"ministral-8b", 36, 32768, func(i int) bool { return i%4 != 0 }, []int{0, 32768, 32768, 32768}, 9},
		{"qwen2 max_window_layers 1 of 2", 2, 16, func(i int) bool { return i >= 1 }, []int{0, 16}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig()
			cfg.NumHiddenLayers = tc.layers
			if tc.window > 0 {
				cfg.LayerTypes, cfg.SlidingWindow = types(tc.layers, tc.sliding), tc.window
				cfg.MaxPositionEmbeddings = 1 << 20
			}
			lay := KVLayoutOf(cfg)
			if !slices.Equal(lay.Windows, tc.windows) || lay.Slots != tc.slots {
				t.Fatalf("groups %v of %d page arrays, want %v of %d", lay.Windows, lay.Slots, tc.windows, tc.slots)
			}
			used := map[[2]int]bool{}
			for l := range tc.layers {
				g, slot := lay.Group[l], lay.Slot[l]
				if (lay.Windows[g] > 0) != (cfg.LayerWindow(l) > 0) || slot < 0 || slot >= lay.Slots || used[[2]int{g, slot}] {
					t.Errorf("layer %d (window %d) in group %d (window %d), page array %d", l, cfg.LayerWindow(l), g, lay.Windows[g], slot)
				}
				used[[2]int{g, slot}] = true
			}
			if got, want := KVBytesPerBlock(cfg, 16, ""), tc.slots*2*16*cfg.NumKeyValueHeads*headDim(cfg)*4; got != want {
				t.Errorf("KVBytesPerBlock %d, want %d", got, want)
			}
		})
	}
}

// TestForwardRejectsInvalidGroupTables: a model with KV groups needs every group's tables, and each
// must name a valid block for every page its queries attend to (a sliding group's pages behind the
// window may be −1).
func TestForwardRejectsInvalidGroupTables(t *testing.T) {
	cfg := tinyConfig()
	cfg.LayerTypes, cfg.SlidingWindow = []string{weights.FullAttention, weights.SlidingAttention}, 4
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	m, err := load(cfg, r.get, Options{NumBlocks: 16, BlockSize: 4}, NewCPUBackend)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// A decode at position 9 (context 10): its window is positions 6-9, pages 1 and 2.
	valid := func() *Step {
		return &Step{
			Tokens: []int32{5}, Positions: []int32{9}, SlotMapping: []int32{2*4 + 1},
			QueryStart: []int32{0, 1}, ContextLens: []int32{10}, BlockTables: [][]int32{{0, 1, 2}},
			GroupBlockTables: [][][]int32{{{-1, 4, 5}}}, LogitRows: []int32{0},
		}
	}
	if _, err := m.Forward(valid()); err != nil {
		t.Fatalf("valid step: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Step)
	}{
		{"no group tables", func(s *Step) { s.GroupBlockTables = nil }},
		{"group tables of no sequence", func(s *Step) { s.GroupBlockTables[0] = nil }},
		{"page in the window given back", func(s *Step) { s.GroupBlockTables[0][0][1] = -1 }},
		{"group table too short", func(s *Step) { s.GroupBlockTables[0][0] = s.GroupBlockTables[0][0][:2] }},
		{"group block out of range", func(s *Step) { s.GroupBlockTables[0][0][2] = 16 }},
		{"full group page given back", func(s *Step) { s.BlockTables[0][0] = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := valid()
			tc.mutate(s)
			if _, err := m.Forward(s); !errors.Is(err, ErrInvalidStep) {
				t.Fatalf("Forward: got %v, want ErrInvalidStep", err)
			}
		})
	}
}

// relErr is ‖got − want‖ / ‖want‖ (infinite when got has a NaN).
func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if math.IsNaN(num) {
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}
