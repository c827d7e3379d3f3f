//go:build cuda

package model

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// fp8KVTol is the relative error allowed between the GPU's logits and the CPU's with an FP8 KV cache:
// fp8MatchCPU's bound for FP8 weights, for the same reason ("Moved codes cascade", docs/fp8.md). The
// GPU quantizes K and V from its own float32 values (products summed in another order; in 16-bit
// compute, from 16-bit inputs), so some elements land on the other side of an e4m3 midpoint and move by
// a code (1/16 of themselves), which moves the next layer's inputs and codes in turn. A fault (a scale
// missing or applied twice, a code read as another byte, a row written to the wrong slot) moves the
// logits by about their own size. A checkpoint with FP8 weights too gets twice the bound: its
// activations' codes move as well, and the two cascades compound.
const fp8KVTol = 1e-1

// fp8KVCase is a checkpoint the FP8 KV tests load on both backends.
type fp8KVCase struct {
	name string
	// open returns the checkpoint: a folder, or (folder nil) a random model's config and tensors.
	folder *weights.Folder
	cfg    *weights.Config
	get    tensorGetter
}

// fp8KVCases are random LLaMA models of head sizes 64 and 128 (KV scales 1, with the warning), a
// compressed-tensors checkpoint with FP8 weights, static input scales and KV scales 0.05 and 0.03 (so a
// scale missing or misapplied shows), the committed FP8 goldens (model/testdata/golden_fp8: a bfloat16
// LLaMA and its FP8 forms; the per-tensor static one carries PyTorch's calibrated KV scales) and some of
// the float goldens (model/testdata/golden: LLaMA 3, Mistral's sliding window, Gemma 3's head size 256 and
// q/k norms, head size 32, which the decode kernels do not cover: its decode steps run the prefill kernel).
func fp8KVCases(t *testing.T) []fp8KVCase {
	var cases []fp8KVCase
	for _, d := range []int{64, 128} {
		cfg := cudaReferenceConfig(d)
		r := newRandomModel(cfg, weights.DTypeBF16, uint64(30+d))
		cases = append(cases, fp8KVCase{name: fmt.Sprintf("random_d%d", d), cfg: cfg, get: r.get})
	}
	dir := t.TempDir()
	weightstest.WriteFP8(t, dir, fp8TestConfig, 23, weightstest.FP8Static, weightstest.FP8Scales{Input: 0.012, K: 0.05, V: 0.03})
	cases = append(cases, fp8KVCase{name: "ct_static_kv_scales", folder: openFolder(t, dir)})
	fp8Dirs, bases := fp8GoldenDirs(t)
	var dirs []string
	dirs = append(dirs, bases...)
	dirs = append(dirs, fp8Dirs...)
	for _, name := range []string{"llama3_bf16_tied_v5", "mistral_bf16_window_v5", "gemma3_bf16_headdim256_v5", "headdim32_bf16_untied_v4"} {
		dirs = append(dirs, filepath.Join(goldenDir, name))
	}
	for _, d := range dirs {
		cases = append(cases, fp8KVCase{name: filepath.Base(d), folder: openFolder(t, d)})
	}
	return cases
}

// loadFP8KV loads c with opts on the backend newBackend makes.
func (c *fp8KVCase) load(t *testing.T, opts Options, newBackend NewBackendFunc) *Model {
	t.Helper()
	var m *Model
	var err error
	if c.folder != nil {
		m, err = LoadOn(c.folder, opts, newBackend)
	} else {
		m, err = load(c.cfg, c.get, opts, newBackend)
	}
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func (c *fp8KVCase) config() *weights.Config {
	if c.folder != nil {
		return c.folder.Config
	}
	return c.cfg
}

// TestCUDAFP8KVMatchesCPU loads every fp8KVCases checkpoint with an FP8 KV cache on the CPU backend (the
// reference: attention.Cache's FP8 arithmetic) and on the GPU in float32 and in the checkpoint's dtype,
// graphs on, the shared-prefix decode asked for always (never taken where no FP8 prefix kernel covers
// the model: float32 compute, head_dim 256), and compares
// every logits row of fp8MatchCPU's steps (prefill chunks beside decode rows, decode batches captured
// and replayed) within fp8KVTol (twice it with FP8 weights). The GPU's pages must be one byte an element.
func TestCUDAFP8KVMatchesCPU(t *testing.T) {
	dev := gpuDevice(t)
	if info := dev.Info(); fp8KVMissing(info) != "" {
		t.Skipf("%s: %s", info.Name, fp8KVMissing(info))
	}
	for _, c := range fp8KVCases(t) {
		for _, dt := range []weights.DType{weights.DTypeF32, weights.DTypeInvalid} {
			name := "native"
			if dt == weights.DTypeF32 {
				name = "f32"
			}
			t.Run(c.name+"/"+name, func(t *testing.T) {
				cfg := c.config()
				compute := dt
				if compute == weights.DTypeInvalid {
					compute = cfg.DType
				}
				opts := Options{NumBlocks: 512, BlockSize: 16, KVCacheDType: KVCacheFP8}
				cpu := c.load(t, opts, NewCPUBackend)
				var backend *cudaBackend
				gpu := c.load(t, opts, func(s Shape) (Backend, error) {
					b, err := newCUDABackend(s, cudaConfig{dtype: compute, dev: dev, sharedPrefix: SharedPrefixAlways})
					backend = b
					return b, err
				})
				if !backend.kvFP8 || backend.kvElem != 1 {
					t.Fatalf("GPU pages: FP8 %v, %d bytes an element", backend.kvFP8, backend.kvElem)
				}
				if got, want := backend.kvBytesPerBlock(), int64(KVBytesPerBlock(cfg, 16, KVCacheFP8)); got != want {
					t.Errorf("GPU page bytes %d, want the CPU's FP8 %d", got, want)
				}
				tol := fp8KVTol
				if cfg.Quantization != nil {
					tol *= 2
				}
				fp8MatchCPU(t, cpu, gpu, cfg.VocabSize, tol)
				st := backend.Stats()
				t.Logf("steps eager %d, captured %d, replayed %d", st.Eager, st.Captured, st.Replayed)
				if backend.decodeFits && st.MixedDecodes == 0 {
					t.Errorf("no mixed step's decodes ran on the FP8 decode kernels")
				}
				if f := backend.facts(); st.SharedDecodes != 0 && !attention.SharedPrefixFP8(f.attnDType, f.headDim) {
					t.Errorf("%d decode calls took the shared-prefix path over FP8 pages of head_dim %d in %v", st.SharedDecodes, f.headDim, f.attnDType)
				}
				// The random models' decode steps run the decode kernels in graphs: captured and replayed.
				if st.CaptureFailed != nil || strings.HasPrefix(c.name, "random") && st.Replayed == 0 {
					t.Errorf("replayed %d graphs, capture error %v", st.Replayed, st.CaptureFailed)
				}
			})
		}
	}
}

// TestCUDAFP8KVSharedPrefix: a decode step whose sequences share pages takes the shared-prefix path
// (SharedPrefixAlways) over bfloat16 pages and over FP8 ones (shared.cu's FP8 prefix kernel), eagerly
// and in a graph's bucket; TestCUDASharedPrefixMatchesCPU runs it.
func TestCUDAFP8KVSharedPrefix(t *testing.T) {
	dev := gpuDevice(t)
	if info := dev.Info(); fp8KVMissing(info) != "" {
		t.Skipf("%s: %s", info.Name, fp8KVMissing(info))
	}
	cfg := cudaReferenceConfig(128)
	r := newRandomModel(cfg, weights.DTypeBF16, 41)
	step := &Step{QueryStart: []int32{0, 1, 2, 3}, ContextLens: []int32{100, 100, 37},
		BlockTables: [][]int32{{0, 1, 2, 3, 4, 5, 6}, {0, 1, 2, 3, 7, 8, 9}, {10, 11, 12}}}
	for _, kv := range []string{"", KVCacheFP8} {
		var backend *cudaBackend
		m, err := load(cfg, r.get, Options{NumBlocks: 64, BlockSize: 16, KVCacheDType: kv}, func(s Shape) (Backend, error) {
			b, err := newCUDABackend(s, cudaConfig{dtype: weights.DTypeBF16, dev: dev, sharedPrefix: SharedPrefixAlways})
			backend = b
			return b, err
		})
		if err != nil {
			t.Fatal(err)
		}
		// An eager step (tables of 7 pages), and a graph step of bucket 4 (context cap 256: 16 pages).
		for _, rows := range []int{0, 4} {
			if d := backend.sharedDecision(step, rows, 256, 16, 7); d == nil {
				t.Errorf("KV %q, bucket %d: no shared-prefix decision", kv, rows)
			}
		}
		m.Close()
	}
}

// TestCUDAFP8KVPages: at the same memory an FP8 KV pool holds twice the pages of a bfloat16 one
// (AllocateKV, one backend after the other, a tenth of the device's memory; within 2%: the free memory
// moves a little between the two), and its pages are zeroed codes (+0).
func TestCUDAFP8KVPages(t *testing.T) {
	dev := gpuDevice(t)
	if info := dev.Info(); fp8KVMissing(info) != "" {
		t.Skipf("%s: %s", info.Name, fp8KVMissing(info))
	}
	cfg := cudaReferenceConfig(128)
	pages := map[string]int{}
	for _, kv := range []string{"", KVCacheFP8} {
		shape, err := shapeOf(cfg, Options{BlockSize: 16, KVCacheDType: kv})
		if err != nil {
			t.Fatal(err)
		}
		shape.NumBlocks = 0 // AllocateKV below
		if kv == KVCacheFP8 {
			shape.KVScales = make([]KVScale, shape.NumLayers)
			for l := range shape.KVScales {
				shape.KVScales[l] = KVScale{K: 1, V: 1}
			}
		}
		backend, err := newCUDABackend(shape, cudaConfig{dtype: weights.DTypeBF16, dev: dev})
		if err != nil {
			t.Fatal(err)
		}
		free, total, err := dev.MemInfo()
		if err != nil {
			t.Fatal(err)
		}
		u := 1.1 - float64(free)/float64(total) // a budget of a tenth of the memory (AllocateKV's rule)
		if u <= 0 || u > 1 {
			backend.Close()
			t.Skipf("less than a tenth of the memory free (%d of %d MiB)", free>>20, total>>20)
		}
		n, err := backend.AllocateKV(u)
		if err != nil {
			backend.Close()
			t.Fatal(err)
		}
		pages[kv] = n
		if kv == KVCacheFP8 {
			probe := make([]byte, 4096)
			k, _ := backend.layerKV(0)
			if err := dev.CopyFromDevice(probe, k); err != nil {
				t.Fatal(err)
			}
			for i, b := range probe {
				if b != 0 {
					t.Fatalf("FP8 page byte %d is %#x, want 0", i, b)
				}
			}
		}
		if err := backend.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ratio := float64(pages[KVCacheFP8]) / float64(pages[""])
	t.Logf("pages: bf16 %d, FP8 %d (×%.3f)", pages[""], pages[KVCacheFP8], ratio)
	if ratio < 1.96 || ratio > 2.04 {
		t.Errorf("FP8 pool of %d pages, bf16 %d: ratio %.3f, want 2", pages[KVCacheFP8], pages[""], ratio)
	}
}

// TestCUDAFP8KVRefusedBelow89: fp8KVMissing refuses GPUs without the e4m3 conversions in hardware,
// naming the need, the GPU and the CPU's flag; checkFP8 passes an FP8 KV cache on this GPU when it has
// them.
func TestCUDAFP8KVRefusedBelow89(t *testing.T) {
	checkFP8Gate(t, fp8KVMissing, "fp8 KV cache")
	dev := gpuDevice(t)
	b := &cudaBackend{dev: dev}
	err := b.checkFP8(false, Shape{KVCacheDType: KVCacheFP8})
	if m := fp8KVMissing(dev.Info()); m == "" && err != nil {
		t.Errorf("FP8 KV on %s: %v", dev.Info().Name, err)
	} else if m != "" && !errors.Is(err, weights.ErrUnsupported) {
		t.Errorf("FP8 KV on %s: %v, want ErrUnsupported", dev.Info().Name, err)
	}
}

// TestCUDAFP8KVRefusesSharedAlways: --shared-prefix always cannot be honoured over FP8 pages on the GPU
// where no FP8 prefix kernel covers the model (float32 compute, head_dim 256), so the load refuses it by
// name instead of running the plain kernels in its place; bfloat16 at head_dim 64 and 128 loads.
func TestCUDAFP8KVRefusesSharedAlways(t *testing.T) {
	gpuDevice(t)
	for _, tc := range []struct {
		headDim int
		dtype   string
		refused bool
	}{{128, "", true}, {256, "bf16", true}, {128, "bf16", false}, {64, "fp16", false}} {
		m, err := LoadRandom(cudaReferenceConfig(tc.headDim), 1, Options{Device: DeviceCUDA, NumBlocks: 16, BlockSize: 16,
			KVCacheDType: KVCacheFP8, SharedPrefix: SharedPrefixAlways, DType: tc.dtype}, nil)
		if !tc.refused {
			if err != nil {
				t.Errorf("head_dim %d, dtype %q: %v", tc.headDim, tc.dtype, err)
			} else {
				m.Close()
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "FP8 KV cache") || !strings.Contains(err.Error(), SharedPrefixAlways) {
			if err == nil {
				m.Close()
			}
			t.Errorf("head_dim %d, dtype %q: load with an FP8 KV cache and shared prefix always: %v, want a refusal naming both",
				tc.headDim, tc.dtype, err)
		}
	}
}
