package openai

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/engine"
)

// gathered is one choice of a completion, from a response or gathered from a stream's chunks.
type gathered struct {
	text     string
	logprobs *completionLogprobs
	// first is a streamed choice's first chunk.
	first *completionChoice
}

// gatherCompletion reads a completion response, streamed or not, into its choices and usage.
func gatherCompletion(t *testing.T, body []byte, stream bool) ([]gathered, *usage) {
	t.Helper()
	if !stream {
		var resp completionResponse
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		out := make([]gathered, len(resp.Choices))
		for i, c := range resp.Choices {
			if c.Index != i {
				t.Fatalf("choice %d has index %d: %s", i, c.Index, body)
			}
			out[i] = gathered{text: c.Text, logprobs: c.Logprobs}
		}
		return out, resp.Usage
	}
	var out []gathered
	var u *usage
	for _, e := range sseEvents(t, body) {
		if e == "[DONE]" {
			continue
		}
		var chunk completionResponse
		if err := json.Unmarshal([]byte(e), &chunk); err != nil {
			t.Fatalf("%v: %s", err, e)
		}
		if chunk.Usage != nil {
			u = chunk.Usage
		}
		for _, c := range chunk.Choices {
			for len(out) <= c.Index {
				out = append(out, gathered{})
			}
			g := &out[c.Index]
			if g.first == nil {
				first := c
				g.first = &first
			}
			g.text += c.Text
			if c.Logprobs != nil {
				if g.logprobs == nil {
					g.logprobs = newCompletionLogprobs()
				}
				g.logprobs.Tokens = append(g.logprobs.Tokens, c.Logprobs.Tokens...)
				g.logprobs.TokenLogprobs = append(g.logprobs.TokenLogprobs, c.Logprobs.TokenLogprobs...)
				g.logprobs.TopLogprobs = append(g.logprobs.TopLogprobs, c.Logprobs.TopLogprobs...)
				g.logprobs.TextOffset = append(g.logprobs.TextOffset, c.Logprobs.TextOffset...)
			}
		}
	}
	return out, u
}

// TestCompletionEchoLogprobs checks echo with logprobs, streamed and not, over the fake engine (whose
// prompt logprobs are -1.5 but for the unscored first token, its generated tokens' -0.5, and its
// alternatives the upper-case letters): each choice's logprobs cover the prompt's tokens, the first
// with null token_logprobs and top_logprobs, then the generated tokens; the tokens spell the text, the
// offsets run from 0 along them; each top_logprobs map holds the token and its logprobs=N
// alternatives; a stream's first chunk of each choice carries the echoed prompt, its logprobs and
// the first generated tokens, as vLLM's does.
func TestCompletionEchoLogprobs(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		echo   []string // each choice's echoed prompt
		prompt []int    // each choice's prompt tokens
		gen    int      // generated tokens each choice returns
		top    int      // logprobs=N
	}{
		{"string prompt", `"prompt":"hi","logprobs":2,"max_tokens":3`, []string{"hi"}, []int{3}, 3, 2},
		{"token ids", `"prompt":[104,105,33],"logprobs":1,"max_tokens":2`, []string{"hi!"}, []int{3}, 2, 1},
		{"n=2", `"prompt":"yo","n":2,"logprobs":1,"max_tokens":2`, []string{"yo", "yo"}, []int{3, 3}, 2, 1},
		{"two prompts, one of a single token", `"prompt":[[104],[121,111,117]],"logprobs":1,"max_tokens":1`, []string{"h", "you"}, []int{1, 3}, 1, 1},
		{"logprobs 0: the token alone", `"prompt":"hi","logprobs":0,"max_tokens":2`, []string{"hi"}, []int{3}, 2, 0},
		{"lm-eval's loglikelihood request", `"prompt":[[104,105],[111,107]],"logprobs":1,"max_tokens":1,"temperature":0,"seed":1234`, []string{"hi", "ok"}, []int{2, 2}, 1, 1},
		{"max_tokens 0: the prompt alone", `"prompt":"hi","logprobs":1,"max_tokens":0`, []string{"hi"}, []int{3}, 0, 1},
		{"special tokens kept", `"prompt":[256,104],"logprobs":1,"max_tokens":1,"skip_special_tokens":false`, []string{"<256>h"}, []int{2}, 1, 1},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			name := tc.name
			body := `{"echo":true,` + tc.body + `}`
			if stream {
				name += ", streamed"
				body = `{"echo":true,"stream":true,"stream_options":{"include_usage":true},` + tc.body + `}`
			}
			t.Run(name, func(t *testing.T) {
				f := &fakeEngine{maxLen: 64}
				_, ts := newFakeServer(t, templateConfig(t), f)
				status, _, raw := call(t, "POST", ts.URL+"/v1/completions", "", body)
				if status != 200 {
					t.Fatalf("%d %s", status, raw)
				}
				for _, r := range f.requests {
					if !r.PromptLogprobs || !r.Logprobs || r.TopLogprobs != tc.top || r.PromptTopLogprobs != tc.top || (tc.gen == 0 && r.MaxTokens != 1) {
						t.Errorf("engine request: prompt logprobs %v, logprobs %v, top %d, max tokens %d", r.PromptLogprobs, r.Logprobs, r.TopLogprobs, r.MaxTokens)
					}
				}
				choices, u := gatherCompletion(t, raw, stream)
				if len(choices) != len(tc.echo) {
					t.Fatalf("%d choices, want %d: %s", len(choices), len(tc.echo), raw)
				}
				// The engine generates one token for max_tokens 0, which usage counts (as vLLM's does).
				if want := len(choices) * max(tc.gen, 1); u == nil || u.CompletionTokens != want {
					t.Errorf("usage %+v, want %d completion tokens", u, want)
				}
				for i, c := range choices {
					gen := "abcdefgh"[:tc.gen]
					if c.text != tc.echo[i]+gen {
						t.Errorf("choice %d text %q, want %q", i, c.text, tc.echo[i]+gen)
					}
					checkEchoLogprobs(t, c.logprobs, c.text, tc.prompt[i], tc.gen, tc.top)
					if !stream {
						continue
					}
					// The first chunk: the prompt and the first output's tokens (two from the fake).
					firstGen := min(tc.gen, 2)
					if c.first.Text != tc.echo[i]+gen[:firstGen] || c.first.Logprobs == nil || len(c.first.Logprobs.Tokens) != tc.prompt[i]+firstGen {
						t.Errorf("choice %d's first chunk %+v, want the prompt %q and %d generated tokens", i, c.first, tc.echo[i], firstGen)
					}
				}
			})
		}
	}
}

// checkEchoLogprobs checks one choice's echo logprobs: prompt tokens then gen generated ones.
func checkEchoLogprobs(t *testing.T, lp *completionLogprobs, text string, prompt, gen, top int) {
	t.Helper()
	if lp == nil {
		t.Fatalf("no logprobs")
	}
	n := prompt + gen
	if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
		t.Fatalf("lengths %d %d %d %d, want %d prompt + %d generated tokens: %+v",
			len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(lp.TextOffset), prompt, gen, lp)
	}
	if joined := strings.Join(lp.Tokens, ""); joined != text {
		t.Errorf("tokens %q spell %q, not the text %q", lp.Tokens, joined, text)
	}
	if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
		t.Errorf("the first prompt token's token_logprobs and top_logprobs must be null: %v %v", lp.TokenLogprobs[0], lp.TopLogprobs[0])
	}
	offset := 0
	for k := range n {
		if lp.TextOffset[k] != offset {
			t.Errorf("text_offset[%d] %d, want %d (offsets %v)", k, lp.TextOffset[k], offset, lp.TextOffset)
		}
		offset += len(lp.Tokens[k])
		if k == 0 {
			continue
		}
		want := float32(-1.5) // the fake's prompt logprobs
		if k >= prompt {
			want = -0.5 // its generated tokens'
		}
		v, top1 := lp.TokenLogprobs[k], lp.TopLogprobs[k]
		if v == nil || *v != want {
			t.Errorf("token_logprobs[%d] %v, want %v", k, v, want)
		}
		if len(top1) != top+1 || v == nil || top1[lp.Tokens[k]] != *v {
			t.Errorf("top_logprobs[%d] %v, want %q and %d alternatives", k, top1, lp.Tokens[k], top)
		}
	}
}

// TestCompletionEchoStream: a streamed echo (without logprobs) sends the prompt in each choice's
// first chunk, together with its first generated text, as vLLM does, not in a chunk of its own.
func TestCompletionEchoStream(t *testing.T) {
	tests := []struct {
		name, body string
		echo       []string
		gen        string
	}{
		{"one choice", `"prompt":"hi","max_tokens":3`, []string{"hi"}, "abc"},
		{"n=2, prompt as ids", `"prompt":[121,111],"n":2,"max_tokens":1`, []string{"yo", "yo"}, "a"},
		{"max_tokens 0", `"prompt":"hi","max_tokens":0`, []string{"hi"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEngine{maxLen: 64}
			_, ts := newFakeServer(t, templateConfig(t), f)
			status, _, raw := call(t, "POST", ts.URL+"/v1/completions", "", `{"echo":true,"stream":true,`+tc.body+`}`)
			if status != 200 {
				t.Fatalf("%d %s", status, raw)
			}
			if f.lastRequest().PromptLogprobs {
				t.Errorf("prompt logprobs asked without logprobs")
			}
			choices, _ := gatherCompletion(t, raw, true)
			if len(choices) != len(tc.echo) {
				t.Fatalf("%d choices: %s", len(choices), raw)
			}
			for i, c := range choices {
				if c.text != tc.echo[i]+tc.gen || c.first.Text != tc.echo[i]+tc.gen[:min(2, len(tc.gen))] || c.logprobs != nil {
					t.Errorf("choice %d: text %q, first chunk %+v", i, c.text, c.first)
				}
			}
		})
	}
}

// TestMaxTokensZero: max_tokens 0 is refused without echo; with echo the response holds the prompt
// alone.
func TestMaxTokensZero(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	status, _, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":0}`)
	if status != 400 || !strings.Contains(string(body), `"param":"max_tokens"`) {
		t.Errorf("without echo: %d %s", status, body)
	}
	status, _, body = call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":0,"echo":true}`)
	choices, _ := gatherCompletion(t, body, false)
	if status != 200 || len(choices) != 1 || choices[0].text != "hi" {
		t.Errorf("with echo: %d %s", status, body)
	}
}

// TestLogprobFloor: -Inf (a token the model rules out) is sent as vLLM's -9999, which JSON can carry.
func TestLogprobFloor(t *testing.T) {
	inf := float32(math.Inf(-1))
	lps := fakePromptLogprobs(engine.Request{PromptIDs: []int32{104, 105}, PromptTopLogprobs: 1})
	lps[1].Logprob, lps[1].Top[0].Logprob = inf, inf
	lp := newCompletionLogprobs()
	lp.appendPrompt(lps, 1)
	data, err := json.Marshal(lp)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); !strings.Contains(got, `"token_logprobs":[null,-9999]`) || !strings.Contains(got, `"A":-9999`) {
		t.Errorf("%s", got)
	}
	chat := chatLogprobsOf(lps[1:])
	if chat.Content[0].Logprob != minLogprob || chat.Content[0].TopLogprobs[0].Logprob != minLogprob {
		t.Errorf("chat logprobs %+v", chat.Content[0])
	}
}

// TestLogitBiasRequest: logit_bias reaches the engine as token ids with their biases, clamped to
// [−100, 100] as vLLM clamps them, from completions and chat alike; without it the engine gets none.
func TestLogitBiasRequest(t *testing.T) {
	f := &fakeEngine{maxLen: 64}
	_, ts := newFakeServer(t, templateConfig(t), f)
	tests := []struct {
		name, path, body string
		want             map[int32]float32
	}{
		{"completions", "/v1/completions", `{"prompt":"a","max_tokens":2,"logit_bias":{"5":3.5,"7":-250,"9":1e9}}`,
			map[int32]float32{5: 3.5, 7: -100, 9: 100}},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_tokens":2,"logit_bias":{"0":-100}}`,
			map[int32]float32{0: -100}},
		{"empty", "/v1/completions", `{"prompt":"a","max_tokens":2,"logit_bias":{}}`, nil},
		{"absent", "/v1/completions", `{"prompt":"a","max_tokens":2}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+tc.path, "", tc.body)
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			if got := f.lastRequest().Sampling.LogitBias; !maps.Equal(got, tc.want) {
				t.Errorf("engine logit bias %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPromptLogprobs checks vLLM's prompt_logprobs over the fake engine (each prompt token at -1.5,
// rank 2; alternatives "A", "B"... at -1, -2..., ranked 1, 2...), on both endpoints: which engine
// requests ask for prompt logprobs and with how many alternatives (the first choice of each prompt
// computes them for all unless echo with logprobs needs them in every choice; with echo and logprobs
// prompt_logprobs, when given, sets the alternatives); each completion choice (the chat response, at
// its top level) carries one entry per prompt token, null first, then the prompt's token before its
// alternatives, each token once; echo's top_logprobs maps keep at most logprobs alternatives; a
// stream (prompt_logprobs 0 only) carries none.
func TestPromptLogprobs(t *testing.T) {
	chat := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, path, body string
		ask              []bool // per engine request (one per choice), whether it asks for prompt logprobs
		top              int    // the alternatives those ask for
		lists            bool   // whether the response has prompt_logprobs
		echoAlts         int    // alternatives in echo's prompt top_logprobs maps; -1: no echo logprobs
	}{
		{"completions", "/v1/completions", `"prompt":[104,105,33],"max_tokens":2,"prompt_logprobs":2`, []bool{true}, 2, true, -1},
		{"0: the prompt's tokens alone", "/v1/completions", `"prompt":"hi","max_tokens":2,"prompt_logprobs":0`, []bool{true}, 0, true, -1},
		{"the cap", "/v1/completions", `"prompt":"hi","max_tokens":1,"prompt_logprobs":20`, []bool{true}, 20, true, -1},
		{"n=2, two prompts: each prompt's first choice computes them", "/v1/completions",
			`"prompt":[[104,105],[121,111,117]],"n":2,"max_tokens":1,"prompt_logprobs":1`, []bool{true, false, true, false}, 1, true, -1},
		{"the prompt's token among the alternatives", "/v1/completions", `"prompt":[104,65,66],"max_tokens":1,"prompt_logprobs":3`, []bool{true}, 3, true, -1},
		{"special tokens kept", "/v1/completions", `"prompt":[104,256,105],"max_tokens":1,"prompt_logprobs":1,"skip_special_tokens":false`, []bool{true}, 1, true, -1},
		{"with logprobs, without echo", "/v1/completions", `"prompt":"hi","max_tokens":2,"logprobs":3,"prompt_logprobs":1`, []bool{true}, 1, true, -1},
		{"echo with logprobs, more prompt_logprobs", "/v1/completions", `"prompt":"hi","echo":true,"logprobs":1,"max_tokens":2,"prompt_logprobs":3`, []bool{true}, 3, true, 1},
		{"echo with logprobs, fewer prompt_logprobs", "/v1/completions", `"prompt":"hi","echo":true,"logprobs":3,"max_tokens":2,"prompt_logprobs":1`, []bool{true}, 1, true, 1},
		{"echo with logprobs, no prompt_logprobs", "/v1/completions", `"prompt":"hi","echo":true,"logprobs":2,"max_tokens":2`, []bool{true}, 2, false, 2},
		{"echo with logprobs, n=2: every choice computes them", "/v1/completions",
			`"prompt":"hi","n":2,"echo":true,"logprobs":1,"max_tokens":2,"prompt_logprobs":2`, []bool{true, true}, 2, true, 1},
		{"echo, max_tokens 0", "/v1/completions", `"prompt":"hi","echo":true,"max_tokens":0,"prompt_logprobs":1`, []bool{true}, 1, true, -1},
		{"stream, 0: ignored", "/v1/completions", `"prompt":"hi","stream":true,"max_tokens":2,"prompt_logprobs":0`, []bool{false}, 0, false, -1},
		{"stream, echo with logprobs, 0", "/v1/completions", `"prompt":"hi","stream":true,"echo":true,"logprobs":2,"max_tokens":2,"prompt_logprobs":0`, []bool{true}, 0, false, 0},
		{"chat", "/v1/chat/completions", chat + `,"max_tokens":2,"prompt_logprobs":2`, []bool{true}, 2, true, -1},
		{"chat, n=2: the first choice computes them", "/v1/chat/completions", chat + `,"n":2,"max_tokens":2,"prompt_logprobs":0`, []bool{true, false}, 0, true, -1},
		{"chat, stream, 0: ignored", "/v1/chat/completions", chat + `,"stream":true,"max_tokens":2,"prompt_logprobs":0`, []bool{false}, 0, false, -1},
		{"chat, logprobs without prompt_logprobs", "/v1/chat/completions", chat + `,"max_tokens":2,"logprobs":true,"top_logprobs":2`, []bool{false}, 0, false, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEngine{maxLen: 64}
			_, ts := newFakeServer(t, templateConfig(t), f)
			status, _, raw := call(t, "POST", ts.URL+tc.path, "", "{"+tc.body+"}")
			if status != 200 {
				t.Fatalf("%d %s", status, raw)
			}
			if len(f.requests) != len(tc.ask) {
				t.Fatalf("%d engine requests, want %d", len(f.requests), len(tc.ask))
			}
			for i, r := range f.requests {
				if r.PromptLogprobs != tc.ask[i] || (r.PromptLogprobs && r.PromptTopLogprobs != tc.top) {
					t.Errorf("engine request %d: prompt logprobs %v with %d alternatives, want %v with %d", i, r.PromptLogprobs, r.PromptTopLogprobs, tc.ask[i], tc.top)
				}
			}
			stream := strings.Contains(tc.body, `"stream":true`)
			if stream {
				if strings.Contains(string(raw), "prompt_logprobs") {
					t.Errorf("a stream with prompt_logprobs: %s", raw)
				}
			} else if got := strings.Count(string(raw), `"prompt_logprobs":`); tc.lists && got != len(tc.ask) && tc.path == "/v1/completions" ||
				tc.lists && got != 1 && tc.path == "/v1/chat/completions" || !tc.lists && got != 0 {
				t.Errorf("%d prompt_logprobs lists: %s", got, raw)
			}
			keep := strings.Contains(tc.body, `"skip_special_tokens":false`)
			switch {
			case tc.path == "/v1/chat/completions" && tc.lists:
				var resp chatResponse
				if err := json.Unmarshal(raw, &resp); err != nil {
					t.Fatalf("%v: %s", err, raw)
				}
				checkPromptLogprobs(t, resp.PromptLogprobs, f.requests[0].PromptIDs, tc.top, keep)
			case tc.path == "/v1/completions" && tc.lists:
				var resp completionResponse
				if err := json.Unmarshal(raw, &resp); err != nil {
					t.Fatalf("%v: %s", err, raw)
				}
				for i, c := range resp.Choices {
					checkPromptLogprobs(t, c.PromptLogprobs, f.requests[i].PromptIDs, tc.top, keep)
				}
			}
			if tc.echoAlts < 0 {
				return
			}
			choices, _ := gatherCompletion(t, raw, stream)
			for i, c := range choices {
				for k := 1; k < len(f.requests[i].PromptIDs); k++ {
					if top := c.logprobs.TopLogprobs[k]; len(top) != tc.echoAlts+1 {
						t.Errorf("choice %d: echo's top_logprobs[%d] %v, want the token and %d alternatives", i, k, top, tc.echoAlts)
					}
				}
			}
		})
	}
}

// checkPromptLogprobs checks a prompt_logprobs list against the fake engine's prompt logprobs for
// prompt ids with k alternatives.
func checkPromptLogprobs(t *testing.T, got []promptPosition, ids []int32, k int, keepSpecial bool) {
	t.Helper()
	if len(got) != len(ids) || got[0] != nil {
		t.Fatalf("prompt_logprobs %v, want %d entries, null first", got, len(ids))
	}
	for j := 1; j < len(ids); j++ {
		want := promptPosition{{ID: ids[j], promptLogprob: promptLogprob{Logprob: -1.5, Rank: 2, DecodedToken: (byteTokenizer{}).Decode(ids[j:j+1], !keepSpecial)}}}
		for r := range k {
			if id := int32('A' + r); id != ids[j] {
				want = append(want, promptToken{ID: id, promptLogprob: promptLogprob{Logprob: -1 - float32(r), Rank: r + 1, DecodedToken: string(rune(id))}})
			}
		}
		if !slices.Equal(got[j], want) {
			t.Errorf("prompt_logprobs[%d] %+v, want %+v", j, got[j], want)
		}
	}
}

// TestPromptLogprobsJSON: prompt_logprobs as vLLM writes them: null, then objects keyed by token id,
// the prompt's token first, each value with logprob, rank and decoded_token; -Inf as -9999.
func TestPromptLogprobsJSON(t *testing.T) {
	lps := fakePromptLogprobs(engine.Request{PromptIDs: []int32{104, 105}, PromptTopLogprobs: 2})
	lps[1].Top[1].Logprob = float32(math.Inf(-1))
	data, err := json.Marshal(promptLogprobsOf(lps))
	if err != nil {
		t.Fatal(err)
	}
	want := `[null,{"105":{"logprob":-1.5,"rank":2,"decoded_token":"i"},"65":{"logprob":-1,"rank":1,"decoded_token":"A"},"66":{"logprob":-9999,"rank":2,"decoded_token":"B"}}]`
	if string(data) != want {
		t.Errorf("got  %s\nwant %s", data, want)
	}
	var back []promptPosition
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(back); string(again) != want {
		t.Errorf("round trip: %s", again)
	}
	if promptLogprobsOf(nil) != nil {
		t.Errorf("no prompt logprobs must give none (the field left out)")
	}
}

// TestBestChoices: of each prompt's best_of outcomes, the n of highest mean log-probability per token
// are kept, best first, ties to the earlier choice; a choice of no tokens ranks last; the prompt's
// logprobs (its first choice's) go to the first one kept.
func TestBestChoices(t *testing.T) {
	lps := func(v ...float32) []engine.Logprobs {
		var out []engine.Logprobs
		for _, x := range v {
			out = append(out, engine.Logprobs{TokenLogprob: engine.TokenLogprob{Logprob: x}})
		}
		return out
	}
	promptLP := lps(-9)
	outs := []outcome{
		// prompt 0: means -1, -0.5, -2 (a longer choice), -0.5 (a tie with choice 1)
		{text: []byte("p0c0"), logprobs: lps(-1, -1), promptLogprobs: promptLP},
		{text: []byte("p0c1"), logprobs: lps(-0.5)},
		{text: []byte("p0c2"), logprobs: lps(-1, -3, -2, -2)},
		{text: []byte("p0c3"), logprobs: lps(0, -1)},
		// prompt 1: none, -3, -0.25, -1
		{text: []byte("p1c0"), promptLogprobs: promptLP},
		{text: []byte("p1c1"), logprobs: lps(-3)},
		{text: []byte("p1c2"), logprobs: lps(-0.25, -0.25)},
		{text: []byte("p1c3"), logprobs: lps(-1)},
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{1, []string{"p0c1", "p1c2"}},
		{2, []string{"p0c1", "p0c3", "p1c2", "p1c3"}},
		{4, []string{"p0c1", "p0c3", "p0c0", "p0c2", "p1c2", "p1c3", "p1c1", "p1c0"}},
	} {
		got := bestChoices(slices.Clone(outs), 4, tc.n, true)
		var texts []string
		for i, o := range got {
			texts = append(texts, string(o.text))
			if i%tc.n == 0 && o.promptLogprobs == nil {
				t.Errorf("n=%d: choice %d (%s) prompt logprobs %v", tc.n, i, o.text, o.promptLogprobs)
			}
		}
		if !slices.Equal(texts, tc.want) {
			t.Errorf("n=%d: kept %v, want %v", tc.n, texts, tc.want)
		}
	}
}
