package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/chattemplate"
	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/tokenizer"
)

// The fuzz targets below send arbitrary bodies to each endpoint of a server over the fake engine,
// with the built-in model's real tokenizer and chat template. Whatever the body, the server must
// not panic (the guard would turn a panic into a 500, which fails the target), must answer with a
// status from the endpoint's allowed set, and must answer either OpenAI's error object or a
// well-formed success (JSON, or Server-Sent Events ending in [DONE]); afterwards nothing may stay
// admitted. Seed corpora are in testdata/fuzz/<target>; run one with
//
//	go test -run '^$' -fuzz '^FuzzCompletionsBody$' -fuzztime 5m ./engine/openai

var (
	fuzzServerOnce sync.Once
	fuzzServer     *Server
	fuzzServerErr  error
)

// fuzzTarget returns the shared server of the fuzz targets (one per fuzzing process).
func fuzzTarget(tb testing.TB) *Server {
	tb.Helper()
	fuzzServerOnce.Do(func() {
		dir, err := defaultmodel.Dir()
		if err != nil {
			fuzzServerErr = err
			return
		}
		folder, err := weights.Open(dir)
		if err != nil {
			fuzzServerErr = err
			return
		}
		defer folder.Close()
		tok, err := tokenizer.Load(folder.TokenizerPath())
		if err != nil {
			fuzzServerErr = err
			return
		}
		tpl, err := chattemplate.Parse(folder.TokenizerConfig.ChatTemplate)
		if err != nil {
			fuzzServerErr = err
			return
		}
		vocab, err := constraint.NewVocabulary(tok, folder.Config.VocabSize)
		if err != nil {
			fuzzServerErr = err
			return
		}
		fuzzServer, fuzzServerErr = New(&fakeEngine{maxLen: 256}, tok, Config{
			ModelName: "fuzz-model", ChatTemplate: tpl, AddSpecialTokens: true, VocabSize: folder.Config.VocabSize,
			BOSToken: folder.TokenizerConfig.BOSToken, EOSToken: folder.TokenizerConfig.EOSToken,
			MaxBodyBytes: 64 << 10, Logger: quietLogger(), WriteTimeout: time.Minute,
			Vocabulary: vocab, ToolCallParser: ToolParserHermes,
		})
	})
	if fuzzServerErr != nil {
		tb.Fatal(fuzzServerErr)
	}
	return fuzzServer
}

// checkAnswer checks one answer of path to body against the contract stated above.
func checkAnswer(t *testing.T, srv *Server, path string, body []byte, allowed ...int) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	req.Host = "localhost" // httptest's example.com is not a host this server (without an API key) serves
	req.Header.Set("Content-Type", "application/json")
	srv.Handler().ServeHTTP(rec, req)
	status, out := rec.Code, rec.Body.Bytes()
	ok := false
	for _, a := range allowed {
		ok = ok || status == a
	}
	if !ok {
		t.Fatalf("status %d (allowed %v) for %q: %s", status, allowed, body, out)
	}
	ctype := rec.Header().Get("Content-Type")
	switch {
	case status != 200:
		if ctype != "application/json" {
			t.Fatalf("error with Content-Type %q", ctype)
		}
		checkErrorObject(t, out)
	case strings.HasPrefix(ctype, "text/event-stream"):
		checkEventStream(t, path, out)
	default:
		if ctype != "application/json" {
			t.Fatalf("success with Content-Type %q", ctype)
		}
		checkSuccess(t, path, out)
	}
	// Admission is released by the stream readers just after their last event; give them a moment.
	for i := 0; srv.admitted.Load() != 0; i++ {
		if i == 10000 {
			t.Fatalf("%d sequences still admitted after the answer", srv.admitted.Load())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func checkErrorObject(t *testing.T, data []byte) {
	t.Helper()
	var e map[string]map[string]any
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("error body is not a JSON object: %v: %s", err, data)
	}
	obj := e["error"]
	if len(e) != 1 || obj == nil {
		t.Fatalf("error body is not {\"error\": {...}}: %s", data)
	}
	if m, ok := obj["message"].(string); !ok || m == "" {
		t.Fatalf("error without a message: %s", data)
	}
	if ty, ok := obj["type"].(string); !ok || ty == "" {
		t.Fatalf("error without a type: %s", data)
	}
	for _, k := range []string{"param", "code"} {
		v, present := obj[k]
		if _, isString := v.(string); !present || (v != nil && !isString) {
			t.Fatalf("error's %s must be a string or null: %s", k, data)
		}
	}
	if !utf8.Valid(data) {
		t.Fatalf("error body is not UTF-8: %q", data)
	}
}

// checkSuccess checks the shape of a non-streamed 200.
func checkSuccess(t *testing.T, path string, data []byte) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("success body is not a JSON object: %v: %s", err, data)
	}
	switch path {
	case "/v1/completions", "/v1/chat/completions":
		want := map[string]string{"/v1/completions": "text_completion", "/v1/chat/completions": "chat.completion"}[path]
		choices, _ := m["choices"].([]any)
		if m["object"] != want || len(choices) == 0 || m["usage"] == nil {
			t.Fatalf("not a %s: %s", want, data)
		}
		for i, c := range choices {
			ch, _ := c.(map[string]any)
			if ch == nil || ch["index"] != float64(i) {
				t.Fatalf("choice %d: %s", i, data)
			}
			if r := ch["finish_reason"]; r != "stop" && r != "length" {
				t.Fatalf("choice %d finish_reason %v: %s", i, r, data)
			}
		}
	case "/tokenize":
		toks, _ := m["tokens"].([]any)
		if m["count"] != float64(len(toks)) || m["max_model_len"] == nil {
			t.Fatalf("not a tokenize answer: %s", data)
		}
	case "/detokenize":
		if _, ok := m["prompt"].(string); !ok || len(m) != 1 {
			t.Fatalf("not a detokenize answer: %s", data)
		}
	}
}

// checkEventStream checks a streamed 200: data lines of JSON chunks, then [DONE].
func checkEventStream(t *testing.T, path string, data []byte) {
	t.Helper()
	if !bytes.HasSuffix(data, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream does not end with [DONE]: %q", data)
	}
	want := map[string]string{"/v1/completions": "text_completion", "/v1/chat/completions": "chat.completion.chunk"}[path]
	if want == "" {
		t.Fatalf("%s streamed", path)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("SSE line without data: %q", line)
		}
		if payload == "[DONE]" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(payload), &m); err != nil {
			t.Fatalf("chunk is not JSON: %v: %q", err, payload)
		}
		if m["error"] != nil {
			t.Fatalf("error event from the fake engine: %s", payload)
		}
		if m["object"] != want {
			t.Fatalf("chunk object %v, want %s: %s", m["object"], want, payload)
		}
	}
}

// addSeeds adds bodies to a fuzz target's corpus (testdata/fuzz holds more).
func addSeeds(f *testing.F, bodies ...string) {
	for _, b := range bodies {
		f.Add([]byte(b))
	}
}

func FuzzCompletionsBody(f *testing.F) {
	addSeeds(f, `{"prompt":"func main() {","max_tokens":5}`,
		`{"model":"fuzz-model","prompt":["a","b"],"n":2,"max_tokens":3,"logprobs":2,"echo":false,"stop":["x","y"],"seed":3}`,
		`{"prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true},"max_tokens":4}`,
		`{"prompt":[[5,6],[7]],"echo":true,"max_tokens":2,"temperature":0.7,"top_p":0.9,"top_k":5,"min_p":0.1}`,
		`{"prompt":"x","stop":"","stop_token_ids":[2],"ignore_eos":true,"min_tokens":1,"max_tokens":2,"skip_special_tokens":false}`,
		`{"prompt":[[5,6],[7]],"echo":true,"logprobs":1,"max_tokens":1,"temperature":0,"seed":1234}`,
		`{"prompt":"func","echo":true,"logprobs":0,"max_tokens":3,"n":2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":"func","echo":true,"logprobs":2,"max_tokens":0}`,
		`{"prompt":"func","max_tokens":3,"temperature":1,"logit_bias":{"5":100,"6":-100,"7":2.5}}`,
		`{"prompt":["a","b"],"n":2,"max_tokens":2,"prompt_logprobs":2,"echo":true,"logprobs":1}`,
		`{"prompt":"func","max_tokens":4,"stop":["n"],"include_stop_str_in_output":true}`,
		`{"prompt":"x","guided_json":{"type":"object"},"stream_options":{"include_usage":true,"x":1}}`,
		`{"prompt":"x","guided_json":"{\"type\":\"array\",\"items\":{\"enum\":[1,2]}}","max_tokens":2}`,
		`{"prompt":"x","structured_outputs":{"regex":"[a-c]+","disable_any_whitespace":true},"max_tokens":2,"stream":true}`,
		`{"prompt":"x","grammar":"root ::= [0-9]+","max_tokens":2,"n":2}`,
		`{"prompt":"x","guided_choice":["a","b"],"guided_decoding_backend":"auto","max_tokens":2}`)
	srv := fuzzTarget(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAnswer(t, srv, "/v1/completions", body, 200, 400, 404, 413)
	})
}

func FuzzChatBody(f *testing.F) {
	addSeeds(f, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`,
		`{"model":"fuzz-model","messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"A"}]},{"role":"assistant","content":null}],"logprobs":true,"top_logprobs":2,"max_completion_tokens":3}`,
		`{"messages":[{"role":"developer","content":"d"},{"role":"user","content":"u"}],"stream":true,"n":2,"stream_options":{"include_usage":true},"max_tokens":3}`,
		`{"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false,"chat_template_kwargs":{"a":[1,{"b":null}]},"max_tokens":1}`,
		`{"messages":[{"role":"user","content":"x"}],"prompt_logprobs":3,"n":2,"max_tokens":2,"logit_bias":{"7":-100}}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":"none","response_format":{"type":"text"},"max_tokens":2}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a","x":1}],"tool_calls":[]}],"response_format":{"type":"json_schema"}}`,
		`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object","properties":{"a":{"$ref":"#/$defs/b"}},"$defs":{"b":{"type":"integer"}}}}},"max_tokens":2}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}],"tool_choice":"required","max_tokens":2,"stream":true}`,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false,"max_tokens":2}`)
	srv := fuzzTarget(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAnswer(t, srv, "/v1/chat/completions", body, 200, 400, 404, 413)
	})
}

func FuzzTokenizeBody(f *testing.F) {
	addSeeds(f, `{"prompt":"func main() {}"}`, `{"prompt":"x","add_special_tokens":false}`,
		`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}`, `{"model":"fuzz-model","prompt":""}`)
	srv := fuzzTarget(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAnswer(t, srv, "/tokenize", body, 200, 400, 404, 413)
	})
}

func FuzzDetokenizeBody(f *testing.F) {
	addSeeds(f, `{"tokens":[1,2,3]}`, `{"tokens":[]}`, `{"model":"fuzz-model","tokens":[4095,0]}`, `{"tokens":[-1]}`)
	srv := fuzzTarget(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAnswer(t, srv, "/detokenize", body, 200, 400, 404, 413)
	})
}
