package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// tinyConfig is the config.json of the random test model: GQA (4 query heads over 2 KV heads), two
// layers, a 300-token vocabulary (bytes, then a few specials).
var tinyConfig = map[string]any{
	"architectures":           []string{"LlamaForCausalLM"},
	"model_type":              "llama",
	"vocab_size":              300,
	"hidden_size":             64,
	"intermediate_size":       128,
	"num_hidden_layers":       2,
	"num_attention_heads":     4,
	"num_key_value_heads":     2,
	"max_position_embeddings": 512,
	"rms_norm_eps":            1e-5,
	"rope_theta":              10000.0,
	"bos_token_id":            256,
	"eos_token_id":            257,
	"tie_word_embeddings":     false,
	"torch_dtype":             "float32",
}

// writeTinyModel writes a random LLaMA checkpoint of tinyConfig into a fresh directory and returns
// it. EOS (257) is one of 300 tokens like any other, so greedy continuations rarely end early.
func writeTinyModel(t testing.TB, seed uint64) string {
	t.Helper()
	dir := t.TempDir()
	weightstest.WriteLlama(t, dir, tinyConfig, seed)
	return dir
}

// loadTinyModel loads the model in dir with a KV pool of numBlocks pages of blockSize tokens.
func loadTinyModel(t testing.TB, dir string, numBlocks, blockSize int) *model.Model {
	t.Helper()
	f, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, model.Options{NumBlocks: numBlocks, BlockSize: blockSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// byteTokenizer decodes ids below 256 as raw bytes and the rest as special tokens "<N>". Multi-byte
// characters therefore arrive split over several tokens, as with byte-fallback tokenizers.
type byteTokenizer struct{}

func (byteTokenizer) Decode(ids []int32, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		switch {
		case id < 256:
			b = append(b, byte(id))
		case !skipSpecial:
			b = append(b, fmt.Sprintf("<%d>", id)...)
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD") // as HF decodes bytes that are not UTF-8
}

// quietLogger discards engine logs in tests.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// result is everything a stream delivered.
type result struct {
	ids      []int32
	text     string
	reason   FinishReason
	stop     string
	usage    Usage
	logprobs []Logprobs
	outputs  int
	err      error
	streamed string // the text delivered before the finishing output
}

// collect reads a stream to its end (with a generous deadline that only a deadlock reaches).
func collect(t testing.TB, s *Stream) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var r result
	var text strings.Builder
	for {
		o, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			r.text = text.String()
			return r
		}
		if err != nil {
			t.Errorf("stream %s: %v (deadlock?)", s.ID(), err)
			r.text = text.String()
			return r
		}
		r.outputs++
		if o.Finished() {
			r.streamed = text.String()
			r.reason, r.stop, r.usage, r.err = o.FinishReason, o.StopString, o.Usage, o.Err
		}
		r.ids = append(r.ids, o.TokenIDs...)
		text.WriteString(o.Text)
		r.logprobs = append(r.logprobs, o.Logprobs...)
	}
}

// newEngine starts an engine over m and byteTokenizer, on the pipelined loop, closed at the end of the
// test.
func newEngine(t testing.TB, m Model, cfg Config) *Engine {
	t.Helper()
	// The pipelined loop on the CPU model too (which would not pipeline: Config.pipelineHostPicks), so
	// that its planning, feeding and undoing are tested without a GPU.
	cfg.pipelineHostPicks = true
	return startEngine(t, m, byteTokenizer{}, cfg)
}

// startEngine starts an engine over m and tok with cfg as given (a quiet logger unless cfg has one)
// and closes it at the end of the test: newEngine's and newPlanEngine's start and cleanup.
func startEngine(t testing.TB, m Model, tok Tokenizer, cfg Config) *Engine {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	e, err := New(m, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := closeEngine(e); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// closeEngine closes e, draining, with a minute's deadline that only a hung engine reaches.
func closeEngine(e *Engine) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.Close(ctx)
}

// closeAndCheckPool closes e (draining) and checks that its KV pool holds no block and is consistent.
func closeAndCheckPool(t testing.TB, e *Engine) {
	t.Helper()
	if err := closeEngine(e); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The loop has exited: the pool is ours to read.
	st := e.pool.Stats()
	if st.UsedBlocks != 0 || e.pool.NumSeqs() != 0 {
		t.Fatalf("leaked KV blocks after every request finished: %+v, %d sequences", st, e.pool.NumSeqs())
	}
	if err := e.pool.CheckInvariants(); err != nil {
		t.Fatalf("pool invariants: %v", err)
	}
}

// waitCancellationSeen waits until the engine has queued a cancelled request for its next turn
// (context.AfterFunc tells it from a goroutine of its own, a moment after cancel returns).
func waitCancellationSeen(t testing.TB, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // only a lost cancellation gets near it
	for {
		e.cancelMu.Lock()
		n := len(e.cancelled)
		e.cancelMu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the engine never saw the cancellation")
		}
		runtime.Gosched()
	}
}
