package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// recordingBackend wraps a Backend and records each step's op sequence with the handles it touched, as
// a CUDA backend capturing graphs would see it.
type recordingBackend struct {
	Backend
	ops []string
}

func (r *recordingBackend) rec(op string, ts ...Tensor) {
	s := op
	for _, t := range ts {
		s += fmt.Sprintf(" %p[%dx%d]", t.Data, t.Rows, t.Cols) // the buffer's identity and view
	}
	r.ops = append(r.ops, s)
}

func (r *recordingBackend) BeginStep(s *Step) error { r.ops = r.ops[:0]; return r.Backend.BeginStep(s) }
func (r *recordingBackend) Embed(dst Tensor, w Weight) {
	r.rec("Embed", dst)
	r.Backend.Embed(dst, w)
}
func (r *recordingBackend) AddRMSNorm(dst, res, add Tensor, w Weight, eps float32) {
	r.rec("AddRMSNorm", dst, res, add)
	r.Backend.AddRMSNorm(dst, res, add, w, eps)
}
func (r *recordingBackend) MatMul(dst, x Tensor, w Weight) {
	r.rec("MatMul", dst, x)
	r.Backend.MatMul(dst, x, w)
}
func (r *recordingBackend) RoPEWriteKV(qkv Tensor, layer int) {
	r.rec(fmt.Sprint("RoPEWriteKV ", layer), qkv)
	r.Backend.RoPEWriteKV(qkv, layer)
}
func (r *recordingBackend) Attention(dst, qkv Tensor, layer int) {
	r.rec(fmt.Sprint("Attention ", layer), dst, qkv)
	r.Backend.Attention(dst, qkv, layer)
}
func (r *recordingBackend) SwiGLU(dst, gu Tensor) {
	r.rec("SwiGLU", dst, gu)
	r.Backend.SwiGLU(dst, gu)
}
func (r *recordingBackend) GatherRows(dst, src Tensor, rows []int32) {
	r.rec("GatherRows", dst, src)
	r.Backend.GatherRows(dst, src, rows)
}
func (r *recordingBackend) CopyToHost(dst [][]float32, src Tensor) error {
	r.rec("CopyToHost", src)
	return r.Backend.CopyToHost(dst, src)
}

// TestDecodeStepsAreReplayable checks the promise Backend makes to a CUDA backend: decode steps with the
// same number of tokens issue the same ops on the same buffers, so one captured graph serves them all.
func TestDecodeStepsAreReplayable(t *testing.T) {
	cfg := tinyConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	var rec *recordingBackend
	m, err := load(cfg, r.get, Options{NumBlocks: 32, BlockSize: 4}, func(s Shape) (Backend, error) {
		b, err := NewCPUBackend(s)
		rec = &recordingBackend{Backend: b}
		return rec, err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := newPager(32, 4, newRand(1))
	if _, err := m.Forward(p.step(chunk{0, []int32{1, 2, 3, 4, 5}}, chunk{1, []int32{6, 7}})); err != nil {
		t.Fatal(err)
	}
	var first []string
	for i := range 6 {
		if _, err := m.Forward(p.step(chunk{0, []int32{int32(i)}}, chunk{1, []int32{int32(i + 1)}})); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = slices.Clone(rec.ops)
			continue
		}
		if !slices.Equal(rec.ops, first) {
			t.Fatalf("decode step %d differs from the first:\n%s\nvs\n%s", i, strings.Join(rec.ops, "\n"),
				strings.Join(first, "\n"))
		}
	}
	// Per layer: 2 norms, 4 products, RoPE+KV, attention, SwiGLU; plus embed, final norm, head, copy (no
	// gather: a decode step wants every row's logits, in order).
	if want := cfg.NumHiddenLayers*9 + 4; len(first) != want {
		t.Fatalf("a decode step issued %d ops, want %d:\n%s", len(first), want, strings.Join(first, "\n"))
	}
}

// TestLoadProgress: Load reports the bytes it has uploaded, from 0 to the checkpoint's total (every
// tensor at the config's dtype), growing with each tensor.
func TestLoadProgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		tie  bool
		dt   weights.DType
	}{{"float32", false, weights.DTypeF32}, {"bfloat16, tied", true, weights.DTypeBF16}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig()
			cfg.TieWordEmbeddings = tc.tie
			cfg.DType = tc.dt
			var want int64
			for _, shape := range weights.TensorShapes(cfg) {
				n := int64(tc.dt.Size())
				for _, d := range shape {
					n *= int64(d)
				}
				want += n
			}
			var calls [][2]int64
			m, err := load(cfg, newRandomModel(cfg, tc.dt, 1).get, Options{NumBlocks: 4,
				Progress: func(loaded, total int64) { calls = append(calls, [2]int64{loaded, total}) }}, NewCPUBackend)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			// One call before the first tensor, one after each: embed, 6 a layer, the norm, the head.
			uploads := 1 + 6*cfg.NumHiddenLayers + 1
			if !tc.tie {
				uploads++
			}
			if len(calls) != uploads+1 || calls[0] != [2]int64{0, want} || calls[len(calls)-1] != [2]int64{want, want} {
				t.Fatalf("%d calls %v; want %d from 0 to %d", len(calls), calls, uploads+1, want)
			}
			for i := 1; i < len(calls); i++ {
				if calls[i][0] <= calls[i-1][0] || calls[i][1] != want {
					t.Fatalf("call %d: %v after %v", i, calls[i], calls[i-1])
				}
			}
		})
	}
}
