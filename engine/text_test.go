package engine

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func ids(s string) []int32 {
	out := make([]int32, len(s))
	for i := range len(s) {
		out[i] = int32(s[i])
	}
	return out
}

// TestStopConditions runs the counting model (after 'a' comes 'b', then 'c', ...) through the
// engine, so every expected output can be written down by hand.
func TestStopConditions(t *testing.T) {
	tests := []struct {
		name     string
		eos      []int32 // the model config's EOS ids
		cfgEOS   []int32 // Config.EOSTokenIDs (generation_config)
		maxPos   int
		script   map[int32]int32
		req      Request
		wantIDs  []int32
		wantText string
		reason   FinishReason
		stop     string
	}{
		{name: "max tokens", req: Request{PromptIDs: ids("a"), MaxTokens: 5},
			wantIDs: ids("bcdef"), wantText: "bcdef", reason: FinishLength},
		{name: "eos from config", eos: []int32{'e'}, req: Request{PromptIDs: ids("a"), MaxTokens: 10},
			wantIDs: ids("bcde"), wantText: "bcd", reason: FinishStop},
		{name: "eos from generation config", eos: []int32{'x'}, cfgEOS: []int32{'d'}, req: Request{PromptIDs: ids("a"), MaxTokens: 10},
			wantIDs: ids("bcd"), wantText: "bc", reason: FinishStop},
		{name: "ignore eos", eos: []int32{'c'}, req: Request{PromptIDs: ids("a"), MaxTokens: 5, IgnoreEOS: true},
			wantIDs: ids("bcdef"), wantText: "bcdef", reason: FinishLength},
		{name: "stop token id", req: Request{PromptIDs: ids("a"), MaxTokens: 10, StopTokenIDs: []int32{'d'}},
			wantIDs: ids("bcd"), wantText: "bc", reason: FinishStop},
		{name: "stop token id despite ignore eos", eos: []int32{'c'}, req: Request{PromptIDs: ids("a"), MaxTokens: 10, StopTokenIDs: []int32{'e'}, IgnoreEOS: true},
			wantIDs: ids("bcde"), wantText: "bcd", reason: FinishStop},
		{name: "stop string across tokens", req: Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"de"}},
			wantIDs: ids("bcde"), wantText: "bc", reason: FinishStop, stop: "de"},
		{name: "first completed stop string wins", req: Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"xyz", "cdefg", "ef"}},
			wantIDs: ids("bcdef"), wantText: "bcd", reason: FinishStop, stop: "ef"},
		{name: "earliest of stop strings completed together", req: Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"xyz", "fg", "defg"}},
			wantIDs: ids("bcdefg"), wantText: "bc", reason: FinishStop, stop: "defg"},
		{name: "stop string kept", req: Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"de"}, IncludeStopString: true},
			wantIDs: ids("bcde"), wantText: "bcde", reason: FinishStop, stop: "de"},
		{name: "earliest stop string kept", req: Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"xyz", "fg", "defg"}, IncludeStopString: true},
			wantIDs: ids("bcdefg"), wantText: "bcdefg", reason: FinishStop, stop: "defg"},
		// The special token's text "<257>" holds the stop string and more after it.
		{name: "stop string kept, text after it cut", script: map[int32]int32{'a': 'b', 'b': 257},
			req:     Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"<25"}, IncludeStopString: true, KeepSpecialTokens: true},
			wantIDs: []int32{'b', 257}, wantText: "b<25", reason: FinishStop, stop: "<25"},
		{name: "stop string inside a token cut", script: map[int32]int32{'a': 'b', 'b': 257},
			req:     Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"<25"}, KeepSpecialTokens: true},
			wantIDs: []int32{'b', 257}, wantText: "b", reason: FinishStop, stop: "<25"},
		{name: "stop string in one token", req: Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"c"}},
			wantIDs: ids("bc"), wantText: "b", reason: FinishStop, stop: "c"},
		{name: "partial stop string released", req: Request{PromptIDs: ids("a"), MaxTokens: 6, Stop: []string{"dx", "fgz"}},
			wantIDs: ids("bcdefg"), wantText: "bcdefg", reason: FinishLength},
		{name: "stop string on the last token beats length", req: Request{PromptIDs: ids("a"), MaxTokens: 3, Stop: []string{"cd"}},
			wantIDs: ids("bcd"), wantText: "b", reason: FinishStop, stop: "cd"},
		{name: "stop string not in the prompt", req: Request{PromptIDs: ids("xa"), MaxTokens: 3, Stop: []string{"xa"}},
			wantIDs: ids("bcd"), wantText: "bcd", reason: FinishLength},
		// EOS under min_tokens is masked (TestMinTokensMasksStops); right after them it stops.
		{name: "eos right after min tokens", eos: []int32{'d', 'f'}, req: Request{PromptIDs: ids("a"), MaxTokens: 10, MinTokens: 2},
			wantIDs: ids("bcd"), wantText: "bc", reason: FinishStop},
		// Stop strings are looked for in the text of the tokens after the first MinTokens (vLLM's
		// BaseIncrementalDetokenizer.update): one that ends in the MinTokens-th token's text is text.
		{name: "min tokens delay stop strings", req: Request{PromptIDs: ids("a"), MaxTokens: 10, MinTokens: 3, Stop: []string{"b", "e"}},
			wantIDs: ids("bcde"), wantText: "bcd", reason: FinishStop, stop: "e"},
		{name: "stop string in the last min token is text", req: Request{PromptIDs: ids("a"), MaxTokens: 5, MinTokens: 3, Stop: []string{"b", "d"}},
			wantIDs: ids("bcdef"), wantText: "bcdef", reason: FinishLength},
		{name: "stop string in the only min token is text", req: Request{PromptIDs: ids("a"), MaxTokens: 3, MinTokens: 1, Stop: []string{"b"}},
			wantIDs: ids("bcd"), wantText: "bcd", reason: FinishLength},
		{name: "stop string begun under min tokens ends after them", req: Request{PromptIDs: ids("a"), MaxTokens: 10, MinTokens: 3, Stop: []string{"de"}},
			wantIDs: ids("bcde"), wantText: "bc", reason: FinishStop, stop: "de"},
		// maxPos 8 with a 5-token prompt leaves room for 3 tokens.
		{name: "context length", maxPos: 8, req: Request{PromptIDs: ids("vwxya"), MaxTokens: 10},
			wantIDs: ids("bcd"), wantText: "bcd", reason: FinishLength},
		{name: "context length without max tokens", maxPos: 8, req: Request{PromptIDs: ids("vwxya")},
			wantIDs: ids("bcd"), wantText: "bcd", reason: FinishLength},
		// é is C3 A9: the first token alone is not text yet.
		{name: "split character", script: map[int32]int32{'a': 0xC3, 0xC3: 0xA9, 0xA9: 'x'},
			req: Request{PromptIDs: ids("a"), MaxTokens: 4}, wantIDs: []int32{0xC3, 0xA9, 'x', 'y'}, wantText: "éxy", reason: FinishLength},
		{name: "split character cut by length is flushed", script: map[int32]int32{'a': 0xC3},
			req: Request{PromptIDs: ids("a"), MaxTokens: 1}, wantIDs: []int32{0xC3}, wantText: "\uFFFD", reason: FinishLength},
		{name: "special tokens skipped", script: map[int32]int32{'a': 257, 257: 'b'},
			req: Request{PromptIDs: ids("a"), MaxTokens: 3}, wantIDs: []int32{257, 'b', 'c'}, wantText: "bc", reason: FinishLength},
		{name: "special tokens kept", script: map[int32]int32{'a': 257, 257: 'b'},
			req: Request{PromptIDs: ids("a"), MaxTokens: 3, KeepSpecialTokens: true}, wantIDs: []int32{257, 'b', 'c'}, wantText: "<257>bc", reason: FinishLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			maxPos := tc.maxPos
			if maxPos == 0 {
				maxPos = 1000
			}
			m := newCountingModel(300, maxPos, 4, 64)
			m.cfg.EOSTokenIDs = tc.eos
			for k, v := range tc.script {
				m.script[k] = v
			}
			e := newEngine(t, m, Config{EOSTokenIDs: tc.cfgEOS})
			s, err := e.Add(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			r := collect(t, s)
			if !slices.Equal(r.ids, tc.wantIDs) {
				t.Errorf("ids %v, want %v", r.ids, tc.wantIDs)
			}
			if r.text != tc.wantText || r.reason != tc.reason || r.stop != tc.stop {
				t.Errorf("text %q, finish %q, stop %q; want %q, %q, %q", r.text, r.reason, r.stop, tc.wantText, tc.reason, tc.stop)
			}
			if r.usage.CompletionTokens != len(r.ids) || r.usage.PromptTokens != len(tc.req.PromptIDs) {
				t.Errorf("usage %+v", r.usage)
			}
			closeAndCheckPool(t, e)
		})
	}
}

// While streaming, text that could begin a stop string is held back, released as soon as it can no
// longer be one, and nothing of a matched stop string is ever sent. The gated model makes every step
// one Output, so each delta is checked, not just their sum.
func TestStreamHoldsBackStopPrefix(t *testing.T) {
	m := newCountingModel(300, 1000, 4, 64)
	e := newEngine(t, m, Config{})
	m.gateSteps(t)
	s, err := e.Add(context.Background(), Request{PromptIDs: ids("a"), MaxTokens: 20, Stop: []string{"efgz", "hij"}})
	if err != nil {
		t.Fatal(err)
	}
	// Tokens b, c, ..., j, one per step; "e", "ef", "efg" could begin "efgz", "h" and "hi" "hij".
	want := []string{"b", "c", "d", "", "", "", "efg", ""}
	for step, delta := range want {
		<-m.entered
		m.gate <- struct{}{}
		o, err := s.Recv(context.Background())
		if err != nil || o.Finished() || len(o.TokenIDs) != 1 || o.Text != delta {
			t.Fatalf("step %d: output %+v, %v; want one token and text %q", step, o, err, delta)
		}
	}
	<-m.entered
	m.gate <- struct{}{}
	if r := collect(t, s); r.text != "" || r.stop != "hij" || r.reason != FinishStop || !slices.Equal(r.ids, ids("j")) {
		t.Fatalf("last output: text %q, stop %q, %q, ids %v; want \"\", hij, stop, [j]", r.text, r.stop, r.reason, r.ids)
	}
	closeAndCheckPool(t, e)
}

func TestLogprobsThroughEngine(t *testing.T) {
	m := newCountingModel(300, 1000, 4, 64)
	e := newEngine(t, m, Config{})
	s, err := e.Add(context.Background(), Request{PromptIDs: ids("a"), MaxTokens: 4, Logprobs: true, TopLogprobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	if len(r.logprobs) != 4 {
		t.Fatalf("%d logprobs for %d tokens", len(r.logprobs), len(r.ids))
	}
	// Logits are 10 for the next token and 0 for the 299 others.
	z := math.Log(math.Exp(10) + 299)
	for i, lp := range r.logprobs {
		if lp.ID != r.ids[i] || math.Abs(float64(lp.Logprob)-(10-z)) > 1e-5 || lp.Rank != 1 {
			t.Errorf("token %d: %+v, want id %d logprob %v rank 1", i, lp, r.ids[i], 10-z)
		}
		if len(lp.Top) != 2 || lp.Top[0].ID != r.ids[i] || lp.Top[1].ID != 0 || math.Abs(float64(lp.Top[1].Logprob)+z) > 1e-5 {
			t.Errorf("token %d: top %+v", i, lp.Top)
		}
	}
	closeAndCheckPool(t, e)
}

// TestLogprobTexts: each chosen token's Text is what it added to the output (the tokens' texts spell
// it: a character split over two byte tokens belongs to the second, an EOS adds nothing), and each
// alternative's Text is its own text after the same tokens (the chosen token's among them, shown
// with U+FFFD where it only begins a character).
func TestLogprobTexts(t *testing.T) {
	tests := []struct {
		name     string
		eos      []int32
		script   map[int32]int32
		req      Request
		want     []string // chosen texts
		wantTop0 []string // the top alternative's (the chosen token: logit 10 against 0)
	}{
		{name: "plain", req: Request{PromptIDs: ids("a"), MaxTokens: 3},
			want: []string{"b", "c", "d"}, wantTop0: []string{"b", "c", "d"}},
		{name: "split character", script: map[int32]int32{'a': 0xC3, 0xC3: 0xA9, 0xA9: 'x'}, req: Request{PromptIDs: ids("a"), MaxTokens: 3},
			want: []string{"", "é", "x"}, wantTop0: []string{"\uFFFD", "é", "x"}},
		{name: "split character cut by length", script: map[int32]int32{'a': 'b', 'b': 0xC3}, req: Request{PromptIDs: ids("a"), MaxTokens: 2},
			want: []string{"b", "\uFFFD"}, wantTop0: []string{"b", "\uFFFD"}},
		{name: "eos", eos: []int32{'c'}, req: Request{PromptIDs: ids("a"), MaxTokens: 5},
			want: []string{"b", ""}, wantTop0: []string{"b", "c"}},
		{name: "special token skipped", script: map[int32]int32{'a': 257, 257: 'b'}, req: Request{PromptIDs: ids("a"), MaxTokens: 2},
			want: []string{"", "b"}, wantTop0: []string{"", "b"}},
		{name: "special token kept", script: map[int32]int32{'a': 257, 257: 'b'}, req: Request{PromptIDs: ids("a"), MaxTokens: 2, KeepSpecialTokens: true},
			want: []string{"<257>", "b"}, wantTop0: []string{"<257>", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newCountingModel(300, 1000, 4, 64)
			m.cfg.EOSTokenIDs = tc.eos
			maps.Copy(m.script, tc.script)
			e := newEngine(t, m, Config{})
			req := tc.req
			req.Logprobs, req.TopLogprobs = true, 2
			s, err := e.Add(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			r := collect(t, s)
			var got, top0 []string
			for _, lp := range r.logprobs {
				got = append(got, lp.Text)
				top0 = append(top0, lp.Top[0].Text)
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(top0, tc.wantTop0) {
				t.Errorf("chosen texts %q, want %q; top alternatives' %q, want %q", got, tc.want, top0, tc.wantTop0)
			}
			if strings.Join(got, "") != r.text {
				t.Errorf("chosen texts %q do not spell the output %q", got, r.text)
			}
			closeAndCheckPool(t, e)
		})
	}
}

// sentencePieceTokenizer mimics a Metaspace decoder: pieces start with "▁" for a space, and the
// decoder drops the space at the very start of the decoded text.
type sentencePieceTokenizer []string

func (v sentencePieceTokenizer) Decode(ids []int32, _ bool) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(strings.ReplaceAll(v[id], "▁", " "))
	}
	return strings.TrimPrefix(b.String(), " ")
}

func TestDetokenizerKeepsSpacesAfterPrompt(t *testing.T) {
	vocab := sentencePieceTokenizer{"▁The", "▁capital", "▁is", "▁Paris", ".", "▁It"}
	tests := []struct {
		name   string
		prompt []int32
		output []int32
		want   []string
	}{
		{"after a prompt", []int32{0, 1, 2}, []int32{3, 4, 5}, []string{" Paris", ".", " It"}},
		{"long prompt", []int32{0, 1, 2, 0, 1, 2, 0, 1}, []int32{2, 3}, []string{" is", " Paris"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDetokenizer(vocab, tc.prompt, true)
			var got []string
			for _, id := range tc.output {
				alt := []TokenLogprob{{ID: id}}
				if d.peek(alt); alt[0].Text != tc.want[len(got)] { // what next will return, without taking it
					t.Errorf("peek(%d) = %q, want %q", id, alt[0].Text, tc.want[len(got)])
				}
				got = append(got, d.next(id))
			}
			if !slices.Equal(got, tc.want) || d.flush() != "" {
				t.Fatalf("deltas %q, want %q", got, tc.want)
			}
		})
	}
}

// byteFallbackTokenizer mimics a SentencePiece tokenizer with byte fallback (Llama 2, Mistral):
// ids below 256 are the byte tokens <0xNN>, the rest pieces of the vocabulary. As HF's ByteFallback
// decoder, a run of byte tokens that is not valid UTF-8 decodes to one U+FFFD per byte, the run's
// valid characters included.
type byteFallbackTokenizer []string

// OpenByteRun makes it a ByteRunTokenizer.
func (v byteFallbackTokenizer) OpenByteRun(ids []int32, _ bool) int {
	k := len(ids)
	for k > 0 && ids[k-1] < 256 {
		k--
	}
	return k
}

func (v byteFallbackTokenizer) Decode(ids []int32, _ bool) string {
	var b strings.Builder
	var run []byte
	endRun := func() {
		if utf8.Valid(run) {
			b.Write(run)
		} else {
			b.WriteString(strings.Repeat("\uFFFD", len(run)))
		}
		run = run[:0]
	}
	for _, id := range ids {
		if id < 256 {
			run = append(run, byte(id))
			continue
		}
		endRun()
		b.WriteString(strings.ReplaceAll(v[id-256], "▁", " "))
	}
	endRun()
	return strings.TrimPrefix(b.String(), " ")
}

// TestDetokenizerPromptEndsInByteRun: when the prompt ends in characters spelled by byte tokens and
// the output goes on with more, the prompt context must not begin inside a character, or the decoder
// turns the whole run, the output's characters included, into U+FFFDs. As vLLM's
// FastIncrementalDetokenizer, the context starts where the prompt's suffix decodes cleanly.
func TestDetokenizerPromptEndsInByteRun(t *testing.T) {
	vocab := byteFallbackTokenizer{"▁x", "▁ok", "▁Say"}
	x, ok, say := int32(256), int32(257), int32(258)
	bytesOf := func(s string) []int32 {
		var out []int32
		for i := range len(s) {
			out = append(out, int32(s[i]))
		}
		return out
	}
	tests := []struct {
		name   string
		prompt []int32
		output []int32
		want   string
	}{
		{"two 4-byte characters", append([]int32{x}, bytesOf("😀😀")...), append(bytesOf("😀"), ok), "😀 ok"},
		{"long prompt", append([]int32{say, x, say, x, say, x, say}, bytesOf("𝔘𝔫")...), append(bytesOf("𝔦"), ok), "𝔦 ok"},
		{"three 3-byte characters", append([]int32{x}, bytesOf("日本語")...), append(bytesOf("語"), ok), "語 ok"},
		{"only bytes", bytesOf("😀😀"), append(bytesOf("😀"), ok), "😀 ok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDetokenizer(vocab, tc.prompt, true)
			var got strings.Builder
			for _, id := range tc.output {
				got.WriteString(d.next(id))
			}
			got.WriteString(d.flush())
			if got.String() != tc.want {
				t.Fatalf("output %q, want %q", got.String(), tc.want)
			}
		})
	}
}

func TestStopMatcher(t *testing.T) {
	m := newStopMatcher([]string{"</s>", "\n\n", ""})
	holds := []struct {
		text string
		hold int
	}{
		{"hello", 0}, {"hello<", 1}, {"hello</", 2}, {"hello</s", 3}, {"a\n", 1}, {"<x", 0}, {"", 0},
	}
	for _, h := range holds {
		if got := m.holdBack(h.text); got != h.hold {
			t.Errorf("holdBack(%q) = %d, want %d", h.text, got, h.hold)
		}
	}
	finds := []struct {
		text    string
		from    int
		pos     int
		stop    string
		matched bool
	}{
		{"ab</s>cd", 0, 2, "</s>", true},
		{"ab</s>cd", 5, 2, "</s>", true}, // the match ends in the new text
		{"ab</s>cd", 6, -1, "", false},   // already seen before the new text
		{"x\n\n</s>", 1, 1, "\n\n", true},
		{"nothing", 0, -1, "", false},
	}
	for _, f := range finds {
		pos, stop, ok := m.find(f.text, f.from)
		if pos != f.pos || stop != f.stop || ok != f.matched {
			t.Errorf("find(%q, %d) = %d, %q, %v; want %d, %q, %v", f.text, f.from, pos, stop, ok, f.pos, f.stop, f.matched)
		}
	}
}

// TestStopStringsRandomized follows random token chains through the engine with random stop strings
// and checks the outcome against a direct reference: the request ends at the first token whose text
// contains a stop string, the text is cut before the earliest match, and everything streamed before
// the end is a prefix of the final text.
func TestStopStringsRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	m := newCountingModel(300, 1000, 4, 256)
	e := newEngine(t, m, Config{})
	letters := "abcdef"
	for trial := range 200 {
		// A random successor for each letter (the fake model is shared, so set it before each run).
		clear(m.script)
		for i := range len(letters) {
			m.script[int32(letters[i])] = int32(letters[rng.IntN(len(letters))])
		}
		var stops []string
		for range 1 + rng.IntN(3) {
			n := 1 + rng.IntN(4)
			b := make([]byte, n)
			for i := range b {
				b[i] = letters[rng.IntN(len(letters))]
			}
			stops = append(stops, string(b))
		}
		maxTokens := 1 + rng.IntN(12)
		prompt := int32(letters[rng.IntN(len(letters))])
		include := rng.IntN(2) == 0

		// Reference.
		var wantIDs []int32
		wantText, wantStop, wantReason := "", "", FinishLength
		text := ""
		for tok := prompt; len(wantIDs) < maxTokens; {
			tok = m.script[tok]
			wantIDs = append(wantIDs, tok)
			text += string(rune(tok))
			pos, stop := -1, ""
			for _, s := range stops {
				if i := strings.Index(text, s); i >= 0 && (pos < 0 || i < pos || (i == pos && len(s) > len(stop))) {
					pos, stop = i, s
				}
			}
			if pos >= 0 {
				if include {
					pos += len(stop)
				}
				text, wantStop, wantReason = text[:pos], stop, FinishStop
				break
			}
		}
		wantText = text

		s, err := e.Add(context.Background(), Request{PromptIDs: []int32{prompt}, MaxTokens: maxTokens, Stop: stops, IncludeStopString: include})
		if err != nil {
			t.Fatal(err)
		}
		var got []int32
		var deltas []string
		var final Output
		for {
			o, err := s.Recv(context.Background())
			if err != nil {
				break
			}
			got = append(got, o.TokenIDs...)
			deltas = append(deltas, o.Text)
			final = o
		}
		gotText := strings.Join(deltas, "")
		if !slices.Equal(got, wantIDs) || gotText != wantText || final.StopString != wantStop || final.FinishReason != wantReason {
			t.Fatalf("trial %d (script %v, stops %q, include %v, max %d): got %v %q %q %q, want %v %q %q %q", trial, m.script, stops, include, maxTokens,
				got, gotText, final.StopString, final.FinishReason, wantIDs, wantText, wantStop, wantReason)
		}
		if streamed := strings.Join(deltas[:len(deltas)-1], ""); !strings.HasPrefix(wantText, streamed) {
			t.Fatalf("trial %d: streamed %q before the end, final text %q", trial, streamed, wantText)
		}
	}
	closeAndCheckPool(t, e)
}

// A request that ends without a stop (cancelled, or closed by the engine) still gets the text it
// produced: what was held back because it might begin a stop string is no longer a stop.
func TestAbortKeepsHeldBackText(t *testing.T) {
	m := newCountingModel(300, 1000, 4, 64)
	e := newEngine(t, m, Config{})
	m.gateSteps(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := e.Add(ctx, Request{PromptIDs: ids("a"), MaxTokens: 10, Stop: []string{"dz"}})
	if err != nil {
		t.Fatal(err)
	}
	for step := range 3 { // b, c, d: "d" is held back, it could begin "dz"
		<-m.entered
		if step == 2 {
			cancel()
			waitCancellationSeen(t, e) // so that the loop aborts before the next step
		}
		m.gate <- struct{}{}
	}
	r := collect(t, s)
	if r.reason != FinishAbort || r.text != "bcd" || !slices.Equal(r.ids, ids("bcd")) {
		t.Fatalf("aborted request: %q, text %q, ids %v; want abort, \"bcd\"", r.reason, r.text, r.ids)
	}
	closeAndCheckPool(t, e)
}

// TestLogprobTextsLlama2: with Llama 2's tokenizer (SentencePiece pieces with "▁" for spaces, bytes
// for what the vocabulary lacks), the chosen tokens' texts spell the output, spaces included, and a
// character spelled by byte tokens belongs to the token that ends their run: at the end of the
// output, its last byte.
func TestLogprobTextsLlama2(t *testing.T) {
	tok := loadEngineTestTokenizer(t, "generated/llama2/tokenizer.json")
	prompt := tok.Encode("The capital of", true)
	all := tok.Encode("The capital of France is Paris, où 😀", true)
	if !slices.Equal(all[:len(prompt)], prompt) {
		t.Fatalf("the prompt's ids %v do not begin the whole text's %v", prompt, all)
	}
	gen := all[len(prompt):]
	m := newCountingModel(tok.VocabSize(), 1000, 4, 64)
	for i, id := range all[len(prompt)-1 : len(all)-1] { // the model follows the text's ids
		if _, dup := m.script[id]; dup {
			t.Fatalf("id %d repeats: the counting model cannot follow the text", id)
		}
		m.script[id] = all[len(prompt)+i]
	}
	e := startEngine(t, m, tok, Config{})
	s, err := e.Add(context.Background(), Request{PromptIDs: prompt, MaxTokens: len(gen), Logprobs: true, TopLogprobs: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	want := " France is Paris, où 😀"
	var texts []string
	for _, lp := range r.logprobs {
		texts = append(texts, lp.Text)
	}
	if r.text != want || strings.Join(texts, "") != want || !slices.Equal(r.ids, gen) {
		t.Errorf("output %q (ids %v), logprob texts %q; want %q spelled by them (ids %v)", r.text, r.ids, texts, want, gen)
	}
	if texts[0] != " France" {
		t.Errorf("first token's text %q, want \" France\" (its space after the prompt)", texts[0])
	}
	closeAndCheckPool(t, e)
}
