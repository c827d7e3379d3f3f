package llm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/openai"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/defaultmodel"
)

// quiet is the logger of the tests' models.
var quiet = slog.New(slog.DiscardHandler)

// loadDefault loads the built-in model on the CPU for one test.
func loadDefault(t *testing.T, cfg Config) *Model {
	t.Helper()
	cfg.Device = "cpu"
	cfg.Logger = quiet
	m, err := Load(t.Context(), "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

// copyDefault copies the built-in model's folder into a temporary one, editing tokenizer_config.json
// with edit when it is not nil.
func copyDefault(t *testing.T, edit func(map[string]any)) string {
	t.Helper()
	src, err := defaultmodel.Dir()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == weights.TokenizerConfigFile && edit != nil {
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			edit(m)
			if data, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestResolve(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", t.TempDir()) // an empty Hugging Face cache
	builtIn, err := defaultmodel.Dir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, model, want string
		err               string
	}{
		{"built-in", "", builtIn, ""},
		{"folder", dir, dir, ""},
		{"missing", filepath.Join(dir, "nope"), "", "no such model folder"},
		{"file", file, "", "is a file, not a model folder"},
		{"hub name not cached", "org-not-here/model-not-here", "", "gollm pull org-not-here/model-not-here"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.model)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Resolve(%q) = %q, %v; want an error with %q", tc.model, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q", tc.model, got, err, tc.want)
			}
		})
	}
	if _, err := Resolve(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing folder: %v, want fs.ErrNotExist", err)
	}
}

func TestCPUKVBlocks(t *testing.T) {
	cfg := &weights.Config{NumHiddenLayers: 2, NumKeyValueHeads: 2, HeadDim: 16, HiddenSize: 32, NumAttentionHeads: 2,
		IntermediateSize: 64, VocabSize: 100, MaxPositionEmbeddings: 1024}
	// One 16-token page: 2 layers × 2 (K, V) × 16 × 2 heads × 16 × 4 bytes = 8 KiB.
	long := *cfg
	long.MaxPositionEmbeddings = 1 << 20 // 65536 pages a context
	bf16 := *cfg
	bf16.DType = weights.DTypeBF16
	// 27040 parameters (4 bytes each), and room for n pages in a quarter of the rest.
	room := func(n int64) int64 { return 4*27040 + 4*8192*n }
	// bfloat16 matrices stay bfloat16 (2 bytes), the 160 norm weights become float32; FP8 matrices (the
	// layers' 20480 parameters in 576 rows; not the embeddings or the LM head, 3200 each) take a byte
	// each and a float32 scale a row.
	bf16Bytes := int64(2*(27040-160) + 4*160)
	fp8Bytes := int64(20480 + 4*576 + 4*160 + 4*2*3200)
	tests := []struct {
		name        string
		cfg         *weights.Config
		available   int64
		maxSeqs     int
		maxModelLen int
		want        int // 0: ErrDoesNotFit
		// Config.Quantization and Config.KVCacheDType
		quantization, kv string
	}{
		{"capped by sequences", cfg, 1 << 40, 4, 0, 4 * 64, "", ""},
		{"capped by memory", cfg, room(100), 1000, 0, 100, "", ""},
		{"at least one context", cfg, room(64) / 2, 4, 0, 64, "", ""},
		{"max model len is the context", cfg, 1 << 40, 4, 256, 4 * 16, "", ""},
		// A 1M-token context does not fit: what memory holds, not 65536 pages (64 GiB here, 2 TiB of
		// float32 KV for Llama-3-8B's shape).
		{"long context, what fits", &long, room(1000), 4, 0, 1000, "", ""},
		{"long context, little memory", &long, 4*27040 + 8192*minKVTokens/16, 4, 0, minKVTokens / 16, "", ""},
		{"long context, the length asked for", &long, 1 << 40, 4, 32768, 4 * 2048, "", ""},
		{"weights do not fit", cfg, 4 * 27040, 4, 0, 0, "", ""},
		{"one context does not fit", cfg, 4*27040 + 8192*63, 4, 0, 0, "", ""},
		{"the length asked for does not fit", &long, room(100), 4, 32768, 0, "", ""},
		// bfloat16 matrices stay bfloat16 on the CPU: 2 bytes a parameter.
		{"bfloat16 weights", &bf16, bf16Bytes + 4*8192*100, 1000, 0, 100, "", ""},
		{"bfloat16 weights do not fit", &bf16, bf16Bytes + 8192*63, 4, 0, 0, "", ""},
		// --quantization fp8: the FP8 matrices take a byte a parameter.
		{"fp8 weights", cfg, fp8Bytes + 4*8192*100, 1000, 0, 100, "fp8", ""},
		// --kv-cache-dtype fp8: a page takes a quarter of float32's 8 KiB, so four times the pages fit.
		{"fp8 KV pages", cfg, room(100), 1000, 0, 400, "", "fp8"},
		{"fp8 KV, one context fits", cfg, 4*27040 + 2048*64, 4, 0, 64, "", "fp8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cpuKVBlocks(tc.cfg, 16, tc.maxSeqs, tc.maxModelLen, tc.available, tc.quantization, tc.kv)
			if tc.want == 0 {
				// The error says what would fit: quantized weights, or a smaller KV cache.
				if !errors.Is(err, ErrDoesNotFit) || !strings.Contains(err.Error(), `"fp8"`) && !strings.Contains(err.Error(), "MaxModelLen") {
					t.Fatalf("cpuKVBlocks = %d, %v; want ErrDoesNotFit saying what to change", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("cpuKVBlocks = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	withCause, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(errors.New("shutting down"))
	tests := []struct {
		name   string
		ctx    context.Context
		model  string
		cfg    Config
		is     error
		substr string
	}{
		{"negative KV blocks", context.Background(), "", Config{KVBlocks: -1}, nil, "KVBlocks -1"},
		{"memory utilization", context.Background(), "", Config{MemoryUtilization: 1.5}, nil, "MemoryUtilization"},
		{"max model len beyond KV blocks", context.Background(), "", Config{KVBlocks: 4, PageSize: 16, MaxModelLen: 100}, ErrDoesNotFit,
			"give more KV pages or a smaller MaxModelLen"},
		// More KV pages than the memory holds (768 TiB): the model does not fit, and the error says why
		// and what to do.
		{"KV blocks beyond memory", context.Background(), "", Config{KVBlocks: 1 << 34}, ErrDoesNotFit, "(give fewer, or 0 to size the cache from memory)"},
		{"KV blocks beyond memory, the model's error", context.Background(), "", Config{KVBlocks: 1 << 34}, model.ErrKVTooLarge, "at most"},
		{"max model len beyond the context", context.Background(), "", Config{MaxModelLen: 4096}, nil, "max_position_embeddings 1024"},
		{"unknown device", context.Background(), "", Config{Device: "tpu"}, nil, "unknown device"},
		{"unknown quantization", context.Background(), "", Config{Quantization: "int4"}, nil, `quantization "int4" (supported: fp8)`},
		{"e5m2 KV cache", context.Background(), "", Config{KVCacheDType: "fp8_e5m2"}, nil, `kv cache dtype "fp8_e5m2"`},
		{"unknown shared prefix", context.Background(), "", Config{SharedPrefix: "sometimes"}, nil, `shared prefix "sometimes"`},
		{"missing folder", context.Background(), "/nonexistent/model", Config{}, fs.ErrNotExist, ""},
		{"cancelled", cancelled, "", Config{}, context.Canceled, ""},
		// The cause given and context.Canceled both, as Load's doc promises an error wrapping ctx's.
		{"cancelled with a cause", withCause, "", Config{}, context.Canceled, "shutting down"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Device == "" {
				tc.cfg.Device = "cpu"
			}
			tc.cfg.Logger = quiet
			m, err := Load(tc.ctx, tc.model, tc.cfg)
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("error %v, want %v with %q", err, tc.is, tc.substr)
			}
		})
	}
}

func TestLoadSizesTheKVCache(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		blocks     int
		maxLen     int
		maxNumSeqs int
	}{
		// The built-in model's context is 1024 tokens: 64 pages of 16 for each of the 64 sequences.
		{"from memory", Config{}, 64 * 64, 1024, 64},
		{"from memory, fewer sequences", Config{MaxNumSeqs: 2}, 2 * 64, 1024, 2},
		{"given", Config{KVBlocks: 10}, 10, 160, 64},
		{"given, with the length", Config{KVBlocks: 10, MaxModelLen: 100}, 10, 100, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := loadDefault(t, tc.cfg)
			if m.KVBlocks() != tc.blocks || m.MaxModelLen() != tc.maxLen || m.maxNumSeqs != tc.maxNumSeqs {
				t.Errorf("%d KV blocks, max model len %d, %d sequences; want %d, %d, %d", m.KVBlocks(), m.MaxModelLen(),
					m.maxNumSeqs, tc.blocks, tc.maxLen, tc.maxNumSeqs)
			}
		})
	}
}

func TestRequestOptions(t *testing.T) {
	m := loadDefault(t, Config{KVBlocks: 64})
	seed := uint64(7)
	want := engine.Request{PromptIDs: []int32{1, 2}, MaxTokens: 5, Stop: []string{"a", "b"}, IncludeStopString: true, IgnoreEOS: true,
		Sampling: engine.SamplingParams{Temperature: 0.5, TopP: 0.9, TopK: 3, MinP: 0.1, RepetitionPenalty: 1.1, PresencePenalty: 0.2,
			FrequencyPenalty: -0.2, Seed: &seed}}
	got := m.Request([]int32{1, 2}, MaxTokens(5), Stop("a"), Stop("b"), IncludeStopString(), IgnoreEOS(), Temperature(0.5),
		TopP(0.9), TopK(3), MinP(0.1), RepetitionPenalty(1.1), PresencePenalty(0.2), FrequencyPenalty(-0.2), Seed(7))
	if *got.Sampling.Seed != 7 {
		t.Fatalf("seed %v", got.Sampling.Seed)
	}
	got.Sampling.Seed = &seed
	if !jsonEqual(got, want) {
		t.Errorf("Request = %+v, want %+v", got, want)
	}
	// Without options: the model's generation_config.json (temperature 0.8, max_new_tokens 256).
	def := m.Request([]int32{1})
	if def.MaxTokens != 256 || def.Sampling.Temperature != 0.8 || def.MaxTokens != m.MaxTokens() || def.Sampling.Temperature != m.Sampling().Temperature {
		t.Errorf("defaults: %+v", def)
	}
	// MaxTokens(0), a cap left unset in the caller's own settings, is the default cap: not the
	// engine's 0, which would run to the end of the context.
	if got := m.Request([]int32{1}, MaxTokens(0)).MaxTokens; got != m.MaxTokens() {
		t.Errorf("MaxTokens(0): a cap of %d, want the default %d", got, m.MaxTokens())
	}
	res, err := m.Generate(t.Context(), "func main() {", MaxTokens(0), IgnoreEOS(), Temperature(0))
	if err != nil || res.FinishReason != engine.FinishLength || res.Usage.CompletionTokens != m.MaxTokens() {
		t.Errorf("MaxTokens(0): %s after %d tokens, %v; want length after %d", res.FinishReason, res.Usage.CompletionTokens, err, m.MaxTokens())
	}
	if _, err := m.Generate(t.Context(), "func", MaxTokens(-1)); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("MaxTokens(-1): %v, want engine.ErrInvalidRequest", err)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// Generate, Stream, Chat and ChatStream are the engine's requests: the same tokens as the request
// sent to the engine directly, text and usage included.
func TestGenerateIsTheEngines(t *testing.T) {
	m := loadDefault(t, Config{KVBlocks: 256})
	ctx := t.Context()
	msgs := []Message{{Role: "system", Content: "You write Go."}, {Role: "user", Content: "A function, please."}}
	chatPrompt, err := m.RenderChat(msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(chatPrompt, "A function, please.") || !strings.HasPrefix(chatPrompt, m.Folder().TokenizerConfig.BOSToken) && !strings.Contains(chatPrompt, "<|user|>") {
		t.Fatalf("rendered chat %q", chatPrompt)
	}
	opts := []Option{MaxTokens(16), Temperature(0), IgnoreEOS()}
	tests := []struct {
		name   string
		ids    []int32
		result func() (Result, error)
		stream func() (Result, error)
	}{
		{"generate", m.Tokenizer().Encode("func main() {", true),
			func() (Result, error) { return m.Generate(ctx, "func main() {", opts...) },
			func() (Result, error) { return collect(m.Stream(ctx, "func main() {", opts...)) }},
		{"chat", m.Tokenizer().Encode(chatPrompt, false),
			func() (Result, error) { return m.Chat(ctx, msgs, opts...) },
			func() (Result, error) { return collect(m.ChatStream(ctx, msgs, opts...)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := m.Engine().Add(ctx, m.Request(tc.ids, opts...))
			if err != nil {
				t.Fatal(err)
			}
			var want Result
			for {
				out, err := s.Recv(ctx)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				want.Text += out.Text
				want.TokenIDs = append(want.TokenIDs, out.TokenIDs...)
				if out.Finished() {
					want.FinishReason, want.Usage = out.FinishReason, out.Usage
				}
			}
			for name, run := range map[string]func() (Result, error){"whole": tc.result, "stream": tc.stream} {
				got, err := run()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				got.Usage.CachedTokens = 0 // the prefix cache serves the repeats
				if got.Text != want.Text || !slices.Equal(got.TokenIDs, want.TokenIDs) || got.FinishReason != engine.FinishLength ||
					got.Usage != (engine.Usage{PromptTokens: len(tc.ids), CompletionTokens: 16}) {
					t.Errorf("%s: %+v, want %+v", name, got, want)
				}
			}
		})
	}
}

// Leaving a stream's loop early aborts the request: its KV pages are freed.
func TestStreamLeftEarly(t *testing.T) {
	m := loadDefault(t, Config{KVBlocks: 64})
	n := 0
	for out, err := range m.Stream(t.Context(), "func main() {", MaxTokens(500), IgnoreEOS()) {
		if err != nil {
			t.Fatal(err)
		}
		n += len(out.TokenIDs)
		if n >= 2 {
			break
		}
	}
	waitIdle(t, m)
}

// waitIdle waits for the engine to hold no sequence and no KV page.
func waitIdle(t *testing.T, m *Model) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		st := m.Engine().Stats()
		if st.Running == 0 && st.Waiting == 0 && st.KVBlocksUsed == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", st)
		}
	}
}

// A context that ends mid-generation ends Generate with the context's error and the text so far.
func TestGenerateCancelled(t *testing.T) {
	m := loadDefault(t, Config{KVBlocks: 64})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var seen int
	for out, err := range m.Stream(ctx, "func main() {", MaxTokens(500), IgnoreEOS()) {
		seen += len(out.TokenIDs)
		if err != nil {
			if !errors.Is(err, context.Canceled) || out.FinishReason != engine.FinishAbort {
				t.Fatalf("last output %+v, error %v; want an abort with context.Canceled", out, err)
			}
			break
		}
		if seen >= 2 {
			cancel()
		}
	}
	if seen >= 500 {
		t.Fatal("the request ran to its end")
	}
	res, err := m.Generate(ctx, "func main() {")
	if !errors.Is(err, context.Canceled) || len(res.TokenIDs) != 0 {
		t.Errorf("Generate with an ended context: %+v, %v", res, err)
	}
	waitIdle(t, m)
}

// A context ended with a cause ends Generate and Stream with an error that wraps both ctx.Err() and
// the cause, at every stage: before the request is added, and while it decodes.
func TestGenerateContextCause(t *testing.T) {
	m := loadDefault(t, Config{KVBlocks: 64})
	cause := errors.New("the user went away")
	check := func(name string, err error, is error) {
		t.Helper()
		if !errors.Is(err, is) || !errors.Is(err, cause) {
			t.Errorf("%s: %v; want an error wrapping %v and the cause", name, err, is)
		}
	}

	ended, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	_, err := m.Generate(ended, "func main() {")
	check("before the request", err, context.Canceled)

	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	var last error
	seen := 0
	for out, err := range m.Stream(ctx, "func main() {", MaxTokens(500), IgnoreEOS()) {
		last = err
		if seen += len(out.TokenIDs); seen >= 2 {
			cancel(cause)
		}
	}
	check("while it decodes", last, context.Canceled)

	timed, stop := context.WithTimeoutCause(t.Context(), 20*time.Millisecond, cause)
	defer stop()
	res, err := m.Generate(timed, "func main() {", MaxTokens(1000), IgnoreEOS())
	check("past its deadline", err, context.DeadlineExceeded)
	if res.FinishReason != engine.FinishAbort || len(res.TokenIDs) >= 1000 {
		t.Errorf("past its deadline: %s after %d tokens", res.FinishReason, len(res.TokenIDs))
	}
	waitIdle(t, m)
}

// Close ends the requests in flight with engine.ErrClosed, and every later one; it may be called from
// several goroutines at once (the model and its mapped files are released once) and again later.
func TestCloseConcurrent(t *testing.T) {
	m, err := Load(t.Context(), "", Config{Device: "cpu", KVBlocks: 64, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	inFlight := make(chan error, 1)
	go func() {
		var err error
		var once sync.Once
		for _, e := range m.Stream(t.Context(), "func main() {", MaxTokens(1000), IgnoreEOS()) {
			err = e
			once.Do(func() { close(started) })
		}
		inFlight <- err
	}()
	<-started
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := m.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
	wg.Wait()
	select {
	case err := <-inFlight:
		if !errors.Is(err, engine.ErrClosed) {
			t.Errorf("the request in flight: %v, want engine.ErrClosed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the request in flight did not end")
	}
	if err := m.Close(); err != nil {
		t.Errorf("close again: %v", err)
	}
	if _, err := m.Generate(t.Context(), "func"); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Generate after Close: %v, want engine.ErrClosed", err)
	}
}

func TestGenerateErrors(t *testing.T) {
	m := loadDefault(t, Config{KVBlocks: 8, MaxModelLen: 64})
	long := strings.Repeat("func main() { ", 100)
	if _, err := m.Generate(t.Context(), long); !errors.Is(err, engine.ErrPromptTooLong) {
		t.Errorf("a prompt longer than the context: %v", err)
	}
	if _, err := m.Generate(t.Context(), "x", Temperature(-1)); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("temperature -1: %v", err)
	}
}

func TestChatWithoutTemplate(t *testing.T) {
	dir := copyDefault(t, func(c map[string]any) { delete(c, "chat_template") })
	m, err := Load(t.Context(), dir, Config{Device: "cpu", KVBlocks: 16, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Name() != filepath.Base(dir) {
		t.Errorf("name %q, want the folder's %q", m.Name(), filepath.Base(dir))
	}
	if _, err := m.Chat(t.Context(), []Message{{Role: "user", Content: "hi"}}); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("Chat: %v, want ErrNoChatTemplate", err)
	}
	if res, err := m.Generate(t.Context(), "func", MaxTokens(2)); err != nil || len(res.TokenIDs) == 0 {
		t.Errorf("Generate: %+v, %v", res, err)
	}
}

func TestHandler(t *testing.T) {
	m := loadDefault(t, Config{KVBlocks: 64})
	h, err := m.Handler(openai.Config{APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	want, err := m.Generate(t.Context(), "// Copyright", MaxTokens(6), Temperature(0))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"health", "GET", "/health", "", 200, ""},
		{"models", "GET", "/v1/models", "", 200, `"id":"gollm-default-go"`},
		{"completion", "POST", "/v1/completions", `{"prompt":"// Copyright","max_tokens":6,"temperature":0}`, 200,
			mustJSON(t, want.Text)},
		{"chat", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, 200, `"chat.completion"`},
		{"metrics", "GET", "/metrics", "", 200, `gollm:num_requests_running{model_name="gollm-default-go"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer k")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.contains) {
				t.Errorf("%d %s; want %d with %s", resp.StatusCode, body, tc.status, tc.contains)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Config.Progress hears the weights load in bytes, up to all of them.
func TestLoadProgress(t *testing.T) {
	var last [2]int64
	calls := 0
	loadDefault(t, Config{KVBlocks: 16, Progress: func(loaded, total int64) { calls++; last = [2]int64{loaded, total} }})
	// The built-in model: 4.5 million bfloat16 parameters.
	if calls < 3 || last[0] != last[1] || last[1] < 8<<20 || last[1] > 10<<20 {
		t.Errorf("%d calls, the last %v", calls, last)
	}
}

// TestLoadSharedPrefixAuto: "auto" names the dispatcher's choice, as "" does (and as KVCacheDType's
// "auto" names the device's type).
func TestLoadSharedPrefixAuto(t *testing.T) {
	for _, v := range []string{"", "auto", "off", "always"} {
		m, err := Load(context.Background(), "", Config{Device: "cpu", KVBlocks: 16, SharedPrefix: v, Logger: quiet})
		if err != nil {
			t.Fatalf("SharedPrefix %q: %v", v, err)
		}
		m.Close()
	}
}
