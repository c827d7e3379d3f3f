package openai_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/engine/openai/loadtest"
)

// TestRealEngine runs the main paths against the real engine and the built-in model (its real
// tokenizer and chat template).
func TestRealEngine(t *testing.T) {
	base := startReal(t, loadtest.ServerOptions{KVBlocks: 128, MaxNumSeqs: 8})
	post := func(t *testing.T, path, body string) (int, map[string]any, string) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(data, &m)
		return resp.StatusCode, m, string(data)
	}
	text := func(m map[string]any, i int) string {
		return m["choices"].([]any)[i].(map[string]any)["text"].(string)
	}
	reason := func(m map[string]any, i int) any { return m["choices"].([]any)[i].(map[string]any)["finish_reason"] }

	t.Run("greedy is deterministic and stops at max_tokens", func(t *testing.T) {
		_, a, raw := post(t, "/v1/completions", `{"prompt":"func main() {","max_tokens":12,"temperature":0,"ignore_eos":true}`)
		_, b, _ := post(t, "/v1/completions", `{"prompt":"func main() {","max_tokens":12,"temperature":0,"ignore_eos":true}`)
		if text(a, 0) == "" || text(a, 0) != text(b, 0) || reason(a, 0) != "length" {
			t.Errorf("greedy: %s vs %q", raw, text(b, 0))
		}
		if u := a["usage"].(map[string]any); u["completion_tokens"] != 12.0 {
			t.Errorf("usage %v", u)
		}
	})
	t.Run("cached tokens", func(t *testing.T) {
		// A prompt of more than two 16-token pages: sent again, its full pages come from the prefix
		// cache, and the usage says how many tokens that was.
		body, _ := json.Marshal(map[string]any{"prompt": strings.Repeat("func main() { fmt.Println(1) }\n", 6), "max_tokens": 2})
		_, a, raw := post(t, "/v1/completions", string(body))
		_, b, rawB := post(t, "/v1/completions", string(body))
		cached := func(m map[string]any) float64 {
			return m["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
		}
		prompt := b["usage"].(map[string]any)["prompt_tokens"].(float64)
		if cached(a) != 0 || cached(b) < 32 || cached(b) >= prompt || int(cached(b))%16 != 0 {
			t.Errorf("cached tokens %v then %v of %v prompt tokens; want 0, then whole pages: %s %s", cached(a), cached(b), prompt, raw, rawB)
		}
	})
	t.Run("seed reproducibility", func(t *testing.T) {
		body := `{"prompt":"package main","max_tokens":16,"temperature":1,"seed":1234,"ignore_eos":true}`
		_, a, _ := post(t, "/v1/completions", body)
		_, b, _ := post(t, "/v1/completions", body)
		_, c, _ := post(t, "/v1/completions", strings.Replace(body, "1234", "99", 1))
		if text(a, 0) != text(b, 0) {
			t.Errorf("same seed, different text: %q vs %q", text(a, 0), text(b, 0))
		}
		if text(a, 0) == text(c, 0) {
			t.Logf("different seeds gave the same text %q (possible but unlikely)", text(a, 0))
		}
	})
	t.Run("best_of returns the n choices of highest mean logprob", func(t *testing.T) {
		// Choice c of a seeded request samples with seed + c, so the n=4 request's choices are the
		// best_of=4 request's candidates; its logprobs rank them.
		all := `{"prompt":"package main","max_tokens":8,"temperature":1,"seed":7,"n":4,"logprobs":0,"ignore_eos":true}`
		_, a, rawA := post(t, "/v1/completions", all)
		type cand struct {
			text string
			mean float64
		}
		var cands []cand
		for i := range 4 {
			lps := a["choices"].([]any)[i].(map[string]any)["logprobs"].(map[string]any)["token_logprobs"].([]any)
			var sum float64
			for _, lp := range lps {
				sum += lp.(float64)
			}
			cands = append(cands, cand{text(a, i), sum / float64(len(lps))})
		}
		best := slices.Clone(cands)
		slices.SortStableFunc(best, func(x, y cand) int { return cmp.Compare(y.mean, x.mean) })
		code, b, rawB := post(t, "/v1/completions", strings.Replace(strings.Replace(all, `"n":4`, `"n":2,"best_of":4`, 1), `,"logprobs":0`, "", 1))
		if code != http.StatusOK || len(b["choices"].([]any)) != 2 {
			t.Fatalf("best_of: %d %s", code, rawB)
		}
		for i := range 2 {
			c := b["choices"].([]any)[i].(map[string]any)
			if text(b, i) != best[i].text || c["index"] != float64(i) || c["logprobs"] != nil {
				t.Errorf("choice %d: %q (index %v, logprobs %v), want %q; candidates %+v; n=4 run %s", i, text(b, i), c["index"], c["logprobs"], best[i].text, cands, rawA)
			}
		}
		if u := b["usage"].(map[string]any); u["completion_tokens"] != 32.0 {
			t.Errorf("usage %v: want the 4 choices' 32 completion tokens", u)
		}
	})
	t.Run("stop string", func(t *testing.T) {
		_, a, _ := post(t, "/v1/completions", `{"prompt":"func main() {","max_tokens":24,"temperature":0,"ignore_eos":true}`)
		full := text(a, 0)
		if len(full) < 4 {
			t.Skipf("greedy continuation too short: %q", full)
		}
		stopAt := full[2:4]
		body, _ := json.Marshal(map[string]any{"prompt": "func main() {", "max_tokens": 24, "temperature": 0, "ignore_eos": true, "stop": []string{stopAt}})
		_, b, raw := post(t, "/v1/completions", string(body))
		want := full[:strings.Index(full, stopAt)]
		if text(b, 0) != want || reason(b, 0) != "stop" {
			t.Errorf("stop %q in %q: got %s, want text %q", stopAt, full, raw, want)
		}
		// include_stop_str_in_output keeps the stop string, streamed too.
		body, _ = json.Marshal(map[string]any{"prompt": "func main() {", "max_tokens": 24, "temperature": 0, "ignore_eos": true,
			"stop": []string{stopAt}, "include_stop_str_in_output": true})
		_, c, raw := post(t, "/v1/completions", string(body))
		if text(c, 0) != want+stopAt || reason(c, 0) != "stop" {
			t.Errorf("stop %q kept: got %s, want text %q", stopAt, raw, want+stopAt)
		}
		var streamed map[string]any
		json.Unmarshal(body, &streamed)
		streamed["stream"] = true
		body, _ = json.Marshal(streamed)
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got strings.Builder
		for line := range strings.Lines(string(data)) {
			if payload, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok && payload != "[DONE]" {
				var chunk map[string]any
				if err := json.Unmarshal([]byte(payload), &chunk); err != nil {
					t.Fatalf("chunk %q: %v", payload, err)
				}
				got.WriteString(text(chunk, 0))
			}
		}
		if got.String() != want+stopAt {
			t.Errorf("streamed with the stop string kept: %q, want %q", got.String(), want+stopAt)
		}
	})
	t.Run("n=2 and logprobs", func(t *testing.T) {
		status, a, raw := post(t, "/v1/completions", `{"prompt":"func","max_tokens":5,"n":2,"logprobs":3,"seed":5,"ignore_eos":true}`)
		if status != 200 || len(a["choices"].([]any)) != 2 {
			t.Fatalf("%d %s", status, raw)
		}
		lp := a["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)
		tokens := lp["tokens"].([]any)
		if len(tokens) != 5 || len(lp["top_logprobs"].([]any)) != 5 || lp["token_logprobs"].([]any)[0].(float64) > 0 {
			t.Errorf("logprobs %v", lp)
		}
		joined := ""
		for _, tok := range tokens {
			joined += tok.(string)
		}
		if joined != text(a, 0) {
			t.Errorf("logprob tokens %q do not spell the text %q", joined, text(a, 0))
		}
	})
	t.Run("logit bias", func(t *testing.T) {
		// A bias of 100 on one token makes every draw that token (greedy and sampled); the engine
		// draws such a request on the host, where the bias applies.
		_, tk, raw := post(t, "/tokenize", `{"prompt":"}","add_special_tokens":false}`)
		ids := tk["tokens"].([]any)
		if len(ids) != 1 {
			t.Fatalf("\"}\" is not one token: %s", raw)
		}
		id := int(ids[0].(float64))
		for _, temp := range []string{"0", "1"} {
			body := fmt.Sprintf(`{"prompt":"func main() {","max_tokens":5,"temperature":%s,"seed":9,"ignore_eos":true,"logit_bias":{"%d":100}}`, temp, id)
			status, m, raw := post(t, "/v1/completions", body)
			if status != 200 || text(m, 0) != "}}}}}" {
				t.Errorf("temperature %s: %d %q, want \"}}}}}\": %s", temp, status, text(m, 0), raw)
			}
		}
	})
	// echo with logprobs needs the engine's prompt logprobs (engine.Request.PromptLogprobs).
	checkEcho := func(t *testing.T, m map[string]any, raw string, choice, promptTokens, gen int) map[string]any {
		t.Helper()
		ch := m["choices"].([]any)[choice].(map[string]any)
		lp, _ := ch["logprobs"].(map[string]any)
		if lp == nil {
			t.Fatalf("no logprobs: %s", raw)
		}
		tokens, lps, tops, offsets := lp["tokens"].([]any), lp["token_logprobs"].([]any), lp["top_logprobs"].([]any), lp["text_offset"].([]any)
		n := promptTokens + gen
		if len(tokens) != n || len(lps) != n || len(tops) != n || len(offsets) != n {
			t.Fatalf("lengths %d %d %d %d, want %d prompt + %d generated tokens: %s", len(tokens), len(lps), len(tops), len(offsets), promptTokens, gen, raw)
		}
		if lps[0] != nil || tops[0] != nil {
			t.Errorf("the first token's token_logprobs and top_logprobs are not null: %v %v", lps[0], tops[0])
		}
		joined := ""
		for k := range n {
			if int(offsets[k].(float64)) != len(joined) {
				t.Errorf("text_offset[%d] %v, want %d", k, offsets[k], len(joined))
			}
			joined += tokens[k].(string)
			if k > 0 {
				v, top := lps[k].(float64), tops[k].(map[string]any)
				if v > 0 || top[tokens[k].(string)] == nil {
					t.Errorf("entry %d: logprob %v, top %v", k, v, top)
				}
			}
		}
		if joined != ch["text"] {
			t.Errorf("tokens spell %q, not the text %q", joined, ch["text"])
		}
		return lp
	}
	t.Run("echo with logprobs", func(t *testing.T) {
		status, m, raw := post(t, "/v1/completions", `{"prompt":"func main() {","max_tokens":4,"echo":true,"logprobs":2,"temperature":0,"ignore_eos":true}`)
		if status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		if !strings.HasPrefix(text(m, 0), "func main() {") {
			t.Errorf("text %q does not start with the prompt", text(m, 0))
		}
		checkEcho(t, m, raw, 0, int(m["usage"].(map[string]any)["prompt_tokens"].(float64)), 4)
	})
	t.Run("echo with logprobs, lm-eval's loglikelihood request", func(t *testing.T) {
		// lm-eval-harness' local-completions sends token ids with echo, logprobs 1 and max_tokens 1,
		// and reads token_logprobs[ctxlen:-1].
		_, tk, raw := post(t, "/tokenize", `{"prompt":"package main\n\nfunc main() {","add_special_tokens":false}`)
		ids := tk["tokens"].([]any)
		idsJSON, _ := json.Marshal(ids)
		status, m, raw := post(t, "/v1/completions", `{"prompt":[`+string(idsJSON)+`,`+string(idsJSON)+`],"max_tokens":1,"echo":true,"logprobs":1,"temperature":0,"seed":1234}`)
		if status != 200 || len(m["choices"].([]any)) != 2 {
			t.Fatalf("%d %s", status, raw)
		}
		a := checkEcho(t, m, raw, 0, len(ids), 1)
		b := checkEcho(t, m, raw, 1, len(ids), 1)
		// Each scored prompt token's logprob against a greedy step over the tokens before it: the
		// best alternative there is what the greedy step picks.
		for _, k := range []int{1, len(ids) - 1} {
			prefix, _ := json.Marshal(ids[:k])
			_, g, graw := post(t, "/v1/completions", `{"prompt":`+string(prefix)+`,"max_tokens":1,"logprobs":1,"temperature":0}`)
			greedy := g["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["token_logprobs"].([]any)[0].(float64)
			best := math.Inf(-1)
			for _, v := range a["top_logprobs"].([]any)[k].(map[string]any) {
				best = math.Max(best, v.(float64))
			}
			if math.Abs(best-greedy) > 1e-2 {
				t.Errorf("prompt position %d: best alternative %v, greedy step %v (%s)", k, best, greedy, graw)
			}
		}
		if fmt.Sprint(a["token_logprobs"]) != fmt.Sprint(b["token_logprobs"]) {
			t.Logf("the same prompt twice scored differently: %v vs %v", a["token_logprobs"], b["token_logprobs"])
		}
	})
	t.Run("prompt_logprobs", func(t *testing.T) {
		// vLLM's prompt_logprobs of a prompt against the echo+logprobs token_logprobs of the same
		// prompt (the engine's prompt logprobs both): one entry per prompt token, null first; each
		// object holds the prompt's token, first, with the same logprob and text, and its k
		// alternatives ranked 1..k, best first.
		_, tk, raw := post(t, "/tokenize", `{"prompt":"package main\n\nfunc main() {","add_special_tokens":false}`)
		ids := tk["tokens"].([]any)
		idsJSON, _ := json.Marshal(ids)
		const k = 3
		status, m, raw := post(t, "/v1/completions", `{"prompt":`+string(idsJSON)+`,"max_tokens":1,"temperature":0,"prompt_logprobs":`+fmt.Sprint(k)+`}`)
		if status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		ch := m["choices"].([]any)[0].(map[string]any)
		if ch["logprobs"] != nil {
			t.Errorf("logprobs without asking: %v", ch["logprobs"])
		}
		pl, _ := ch["prompt_logprobs"].([]any)
		_, e, eraw := post(t, "/v1/completions", `{"prompt":`+string(idsJSON)+`,"max_tokens":1,"echo":true,"logprobs":1,"temperature":0}`)
		echo := checkEcho(t, e, eraw, 0, len(ids), 1)
		if len(pl) != len(ids) || pl[0] != nil {
			t.Fatalf("prompt_logprobs of %d entries (want %d, null first): %s", len(pl), len(ids), raw)
		}
		// The prompt's token comes first in each object: decode keeping the order.
		var ordered struct {
			Choices []struct {
				PromptLogprobs []json.RawMessage `json:"prompt_logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(raw), &ordered); err != nil {
			t.Fatal(err)
		}
		for j := 1; j < len(ids); j++ {
			id := fmt.Sprint(int(ids[j].(float64)))
			pos := pl[j].(map[string]any)
			tok, _ := pos[id].(map[string]any)
			if tok == nil {
				t.Errorf("prompt_logprobs[%d] %v lacks the prompt's token %s", j, pos, id)
				continue
			}
			if !strings.HasPrefix(string(ordered.Choices[0].PromptLogprobs[j]), `{"`+id+`":`) {
				t.Errorf("prompt_logprobs[%d] does not start with the prompt's token %s: %s", j, id, ordered.Choices[0].PromptLogprobs[j])
			}
			lp, rank := tok["logprob"].(float64), int(tok["rank"].(float64))
			if want := echo["token_logprobs"].([]any)[j].(float64); math.Abs(lp-want) > 1e-3 {
				t.Errorf("prompt token %d: prompt_logprobs %v, echo's token_logprobs %v", j, lp, want)
			}
			if want := echo["tokens"].([]any)[j]; tok["decoded_token"] != want {
				t.Errorf("prompt token %d: decoded_token %q, echo's token %q", j, tok["decoded_token"], want)
			}
			if rank < 1 || len(pos) != k+1 && !(rank <= k && len(pos) == k) {
				t.Errorf("prompt token %d: rank %d, %d entries (k=%d): %v", j, rank, len(pos), k, pos)
			}
			ranks := map[int]float64{}
			for key, v := range pos {
				v := v.(map[string]any)
				if key != id || rank <= k {
					ranks[int(v["rank"].(float64))] = v["logprob"].(float64)
				}
				if _, ok := v["decoded_token"].(string); !ok || v["logprob"].(float64) > 0 {
					t.Errorf("prompt token %d: entry %s %v", j, key, v)
				}
			}
			for r := 1; r <= k; r++ {
				if _, ok := ranks[r]; !ok || r > 1 && ranks[r] > ranks[r-1] {
					t.Errorf("prompt token %d: alternatives' ranks and logprobs %v, want 1..%d descending", j, ranks, k)
					break
				}
			}
			if ranks[1] < lp-1e-6 {
				t.Errorf("prompt token %d: the best alternative %v is below the token's %v", j, ranks[1], lp)
			}
		}
	})
	t.Run("prompt_logprobs, chat", func(t *testing.T) {
		status, m, raw := post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"A loop"}],"max_tokens":2,"n":2,"prompt_logprobs":1}`)
		if status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		pl, _ := m["prompt_logprobs"].([]any)
		if n := int(m["usage"].(map[string]any)["prompt_tokens"].(float64)); len(pl) != n || pl[0] != nil {
			t.Fatalf("prompt_logprobs of %d entries, want %d, null first: %s", len(pl), n, raw)
		}
		for j := 1; j < len(pl); j++ {
			if pos := pl[j].(map[string]any); len(pos) < 1 || len(pos) > 2 {
				t.Errorf("prompt_logprobs[%d] %v", j, pos)
			}
		}
		for _, c := range m["choices"].([]any) {
			if _, ok := c.(map[string]any)["prompt_logprobs"]; ok {
				t.Errorf("a chat choice with prompt_logprobs: %s", raw)
			}
		}
	})
	t.Run("echo with logprobs, max_tokens 0", func(t *testing.T) {
		status, m, raw := post(t, "/v1/completions", `{"prompt":"func main() {","max_tokens":0,"echo":true,"logprobs":0}`)
		if status != 200 || text(m, 0) != "func main() {" {
			t.Fatalf("%d %s", status, raw)
		}
		checkEcho(t, m, raw, 0, int(m["usage"].(map[string]any)["prompt_tokens"].(float64)), 0)
	})
	t.Run("echo with logprobs, streamed", func(t *testing.T) {
		body := `{"prompt":"func main() {","max_tokens":6,"echo":true,"logprobs":1,"temperature":0,"ignore_eos":true}`
		_, whole, _ := post(t, "/v1/completions", body)
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(strings.Replace(body, "{", `{"stream":true,`, 1)))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		streamed, first := "", ""
		var tokens []any
		for _, line := range strings.Split(string(data), "\n") {
			payload, ok := strings.CutPrefix(line, "data: ")
			if !ok || payload == "[DONE]" {
				continue
			}
			var chunk map[string]any
			if err := json.Unmarshal([]byte(payload), &chunk); err != nil {
				t.Fatalf("%v: %s", err, payload)
			}
			ch := chunk["choices"].([]any)[0].(map[string]any)
			if first == "" {
				first = ch["text"].(string)
			}
			streamed += ch["text"].(string)
			tokens = append(tokens, ch["logprobs"].(map[string]any)["tokens"].([]any)...)
		}
		wantTokens := whole["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["tokens"].([]any)
		spelt := ""
		for _, tok := range tokens {
			spelt += tok.(string)
		}
		if streamed != text(whole, 0) || !strings.HasPrefix(first, "func main() {") || spelt != streamed || fmt.Sprint(tokens) != fmt.Sprint(wantTokens) {
			t.Errorf("streamed %q (first chunk %q), tokens %q; whole %q, tokens %q", streamed, first, tokens, text(whole, 0), wantTokens)
		}
	})
	t.Run("chat stream", func(t *testing.T) {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(
			`{"messages":[{"role":"system","content":"Write Go."},{"role":"user","content":"A loop"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2}`))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s := string(data)
		if resp.StatusCode != 200 || !strings.Contains(s, `"role":"assistant"`) || !strings.Contains(s, `"choices":[],"usage":{`) ||
			!strings.HasSuffix(s, "data: [DONE]\n\n") || !strings.Contains(s, `"top_logprobs":[{`) {
			t.Errorf("%d %s", resp.StatusCode, s)
		}
	})
	t.Run("tokenize round trip", func(t *testing.T) {
		_, tk, raw := post(t, "/tokenize", `{"prompt":"func main() {}","add_special_tokens":false}`)
		ids, _ := json.Marshal(tk["tokens"])
		_, dt, _ := post(t, "/detokenize", `{"tokens":`+string(ids)+`}`)
		if dt["prompt"] != "func main() {}" {
			t.Errorf("tokenize %s, detokenize %v", raw, dt)
		}
	})
	t.Run("prompt longer than the context", func(t *testing.T) {
		status, _, raw := post(t, "/v1/completions", `{"prompt":"`+strings.Repeat("x ", 2000)+`"}`)
		if status != 400 || !strings.Contains(raw, "maximum context length") || !strings.Contains(raw, `"code":"context_length_exceeded"`) {
			t.Errorf("%d %s", status, raw)
		}
	})
	kv, err := loadtest.WaitIdle(t.Context(), base)
	if err != nil || kv.BlocksUsed != 0 {
		t.Errorf("KV after the tests: %+v %v", kv, err)
	}
}
