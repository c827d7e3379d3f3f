package server

import (
	"encoding/json"
	"maps"
	"math"
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
	lp.appendPrompt(lps)
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
