//go:build cuda

package attention

import (
	_ "embed"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/internal/dtype"
)

// BenchmarkCUDADecodeVariants times the decode kernels' variants that `gollm bench attention` cannot
// select (the split-k merge: fused in one or two levels, or the reduce kernel) on the split-k shapes of
// the issue-6 grid, bf16, page 16, each sequence at ctx tokens, pages permuted, inputs rotated among
// copies totalling 4× L2, a 50 µs GPU spin before each timed call (as the gollm bench does). Each
// sub-benchmark reports the lower of two rounds' median CUDA-event time of 100 calls as "us"; run it with
// -test.benchtime=1x (b.N is not the number of calls timed).
func BenchmarkCUDADecodeVariants(b *testing.B) {
	k, t := benchTimer(b)
	for _, s := range variantShapes {
		in, err := newVariantInputs(k, s, pagesRandom)
		if err != nil {
			b.Fatal(err)
		}
		plan, err := k.Plan(&in.args[0])
		if err != nil {
			in.free()
			b.Fatal(err)
		}
		name := fmt.Sprintf("%s_b%d_ctx%d", s.name, s.batch, s.ctx)
		run := func(what string, launch func(c int) error) { reportUS(b, t, name+"/"+what, in.copies, launch) }
		run("grouped", func(c int) error { return k.DecodeGrouped(nil, &in.args[c], PathAuto) })
		// The L2 policy of the K/V copies, with the spin and after a do_bench-like flush.
		for _, flush := range []bool{false, true} {
			for _, pol := range []struct {
				name string
				t    CUDATuning
			}{
				{"rule", CUDATuning{}}, {"evictfirst", CUDATuning{EvictFirstLarge: true}},
				{"normal", CUDATuning{NoEvictFirst: true}},
			} {
				tn := pol.t
				what := fmt.Sprintf("policy/%s/flush=%v", pol.name, flush)
				t.Flush = flush
				run(what, func(c int) error {
					plan, err := k.Plan(&in.args[c])
					if err != nil {
						return err
					}
					if plan.Kernel == SplitK {
						return k.decodeSplitK(nil, &in.args[c], plan.PartitionTokens, in.ws, in.wsBytes, PathAuto, tn)
					}
					return k.decodeGrouped(nil, &in.args[c], PathAuto, tn)
				})
				t.Flush = false
			}
		}
		if s.persistOnly {
			run("grouped-classic", func(c int) error {
				return k.decodeGrouped(nil, &in.args[c], PathAuto, CUDATuning{NoPersistent: true})
			})
			run("grouped-persistent-1persm", func(c int) error {
				return k.decodeGrouped(nil, &in.args[c], PathAuto, CUDATuning{persistPrograms: k.numSMs})
			})
			in.free()
			continue
		}
		run(fmt.Sprintf("plan-%v-%d", plan.Kernel, plan.PartitionTokens), func(c int) error {
			_, err := k.Decode(nil, &in.args[c], in.ws, in.wsBytes)
			return err
		})
		if plan.Kernel == SplitK && len(decodeDiagCuts) > 0 {
			// Where the time goes (gollmdiag builds): the plan's programs cut short (the output is wrong;
			// the time is the call's without the rest), and the whole call.
			for _, d := range append(decodeDiagCuts, diagCut{"full", CUDATuning{}}) {
				for _, flush := range []bool{false, true} {
					t.Flush = flush
					run(fmt.Sprintf("diag/%s/flush=%v", d.name, flush), func(c int) error {
						return k.decodeSplitK(nil, &in.args[c], plan.PartitionTokens, in.ws, in.wsBytes, PathAuto, d.t)
					})
					t.Flush = false
				}
			}
		}
		for _, part := range variantPartitions(s, k.numSMs, plan) {
			merges := []struct {
				name string
				t    CUDATuning
			}{{"fused", CUDATuning{}}, {"reduce", CUDATuning{SplitKReduceKernel: true}}}
			if part == plan.PartitionTokens {
				merges = append(merges, struct {
					name string
					t    CUDATuning
				}{"fused1level", CUDATuning{MergeChunk: 1 << 20}}, struct {
					name string
					t    CUDATuning
				}{"fusedchunk4", CUDATuning{MergeChunk: 4}}, struct {
					name string
					t    CUDATuning
				}{"fusedchunk8", CUDATuning{MergeChunk: 8}})
			}
			for _, m := range merges {
				run(fmt.Sprintf("split%d/%s", part, m.name), func(c int) error {
					return k.decodeSplitK(nil, &in.args[c], part, in.ws, in.wsBytes, PathAuto, m.t)
				})
			}
		}
		in.free()
	}
}

// benchTimer returns the kernels and a Timer of 100 runs after 10 warm-up runs with a 50 µs spin before
// each (closed when b ends): the setup of this file's benchmarks.
func benchTimer(b *testing.B) (*CUDAKernels, *cuda.Timer) {
	k := gpuKernels(b)
	t, err := k.Device().NewTimer(100, 10, 50_000)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(t.Close)
	return k, t
}

// reportUS runs a sub-benchmark name that reports t's median time of launch over copies copies as "us".
func reportUS(b *testing.B, t *cuda.Timer, name string, copies int, launch func(c int) error) {
	b.Run(name, func(b *testing.B) {
		us, err := t.Median(copies, launch)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(us, "us")
		b.ReportMetric(0, "ns/op")
	})
}

type variantShape struct {
	name                         string
	batch, ctx, hq, hkv, headDim int
	persistOnly                  bool // time only the grouped kernels
}

// variantShapes are the shapes of the issue-6 grid (scripts/bench/attention-shapes.json) where split-k
// runs or nearly does.
var variantShapes = []variantShape{
	{"mha", 16, 4096, 12, 12, 128, false}, {"mha", 8, 8192, 12, 12, 128, false}, {"mha", 4, 16384, 12, 12, 128, false},
	{"mha", 2, 32768, 12, 12, 128, false}, {"mha", 1, 65536, 12, 12, 128, false}, {"mha", 1, 131072, 12, 12, 128, false},
	{"gqa", 64, 1024, 12, 2, 128, false}, {"gqa", 32, 2048, 12, 2, 128, false}, {"gqa", 16, 4096, 12, 2, 128, false},
	{"gqa", 8, 8192, 12, 2, 128, false}, {"gqa", 4, 16384, 12, 2, 128, false}, {"gqa", 2, 32768, 12, 2, 128, false},
	{"gqa", 1, 65536, 12, 2, 128, false}, {"gqa", 1, 131072, 12, 2, 128, false},
	{"llama3", 8, 2048, 32, 8, 128, false}, {"llama3", 1, 8192, 32, 8, 128, false}, {"llama3", 1, 131072, 32, 8, 128, false},
	{"llama70b", 4, 2048, 64, 8, 128, false}, {"llama70b", 8, 2048, 64, 8, 128, false}, {"mqa", 16, 4096, 32, 1, 128, false},
	// Grouped shapes with more (sequence, KV head) items than resident programs: classic and persistent.
	{"mha", 256, 256, 12, 12, 128, true}, {"mha", 128, 512, 12, 12, 128, true},
	{"mha", 64, 1024, 12, 12, 128, true}, {"mha", 32, 2048, 12, 12, 128, true},
	{"gqa", 256, 256, 12, 2, 128, true}, {"llama3", 64, 4096, 32, 8, 128, true},
	{"llama3", 256, 1024, 32, 8, 128, true}, {"llama3", 128, 8192, 32, 8, 128, true},
}

// variantPartitions are the split-k partition sizes timed for s: powers of two, the plan's, and those
// giving about 1, 1.5, 2 and 3 programs per SM (rounded to whole 64-token tiles).
func variantPartitions(s variantShape, sms int, plan DecodePlan) []int {
	parts := []int{256, 512, 1024, 2048, 4096, 8192}
	if plan.Kernel == SplitK {
		parts = append(parts, plan.PartitionTokens)
	}
	for _, per := range []float64{1, 1.5, 2, 3} {
		n := math.Ceil(per * float64(sms) / float64(s.batch*s.hkv)) // partitions per sequence
		parts = append(parts, roundUp(ceilDiv(s.ctx, int(n)), cudaTileTokens))
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	return slices.DeleteFunc(parts, func(p int) bool { return p >= s.ctx || p < 64 })
}

// variantInputs are the device buffers of one shape: copies of the paged K/V in one pool, each copy's
// pages scattered by a random permutation (newVariantInputs' sequential: in order), and a split-k
// workspace.
type variantInputs struct {
	bufs    *cuda.Buffers
	args    []CUDADecodeArgs
	copies  int
	ws      cuda.DevicePtr
	wsBytes int64
}

func (in *variantInputs) alloc(n int64) (cuda.DevicePtr, error) { return in.bufs.Alloc(n) }
func (in *variantInputs) free()                                 { _ = in.bufs.Free() }

// pageOrder is how newVariantInputs lays a copy's pages (each sequence's logical pages, sequences one
// after another) over the pool.
type pageOrder int

const (
	pagesRandom       pageOrder = iota // a random permutation of the copy's pages (the grid's)
	pagesSequential                    // in order: a contiguous cache's layout
	pagesLocal                         // in order by 2 MiB window, permuted within each window
	pagesWindows                       // windows of 2 MiB in a random order, pages in order within each
	pagesRandomKV                      // pagesRandom with each page's K and V side by side in one pool
	pagesSequentialKV                  // pagesSequential with each page's K and V side by side
)

func (o pageOrder) String() string {
	return [...]string{"random", "sequential", "local", "windows", "random-kv", "sequential-kv"}[o]
}

// interleaved reports whether o keeps a page's K and V side by side (FlashInfer's [page][2][…] layout):
// one pool of twice the pages, K at the even pages and V at the odd ones, which the kernels read unchanged
// through block ids doubled and a V base one page past the K base.
func (o pageOrder) interleaved() bool { return o == pagesRandomKV || o == pagesSequentialKV }

// base is the order of o's page permutation.
func (o pageOrder) base() pageOrder {
	switch o {
	case pagesRandomKV:
		return pagesRandom
	case pagesSequentialKV:
		return pagesSequential
	}
	return o
}

// pagePermutation returns where each of n pages of pageBytes goes under order o.
func pagePermutation(rng *rand.Rand, n int, pageBytes int64, o pageOrder) []int {
	perm := rng.Perm(n)
	if o = o.base(); o == pagesRandom {
		return perm
	}
	for i := range perm {
		perm[i] = i
	}
	w := int(max(1, (2<<20)/pageBytes)) // pages a 2 MiB window holds
	switch o {
	case pagesLocal:
		for lo := 0; lo < n; lo += w {
			win := perm[lo:min(n, lo+w)]
			rng.Shuffle(len(win), func(i, j int) { win[i], win[j] = win[j], win[i] })
		}
	case pagesWindows:
		order := rng.Perm((n + w - 1) / w)
		out := perm[:0:0]
		for _, win := range order {
			for p := win * w; p < min(n, (win+1)*w); p++ {
				out = append(out, p)
			}
		}
		perm = out
	}
	return perm
}

func newVariantInputs(k *CUDAKernels, s variantShape, order pageOrder) (*variantInputs, error) {
	const pageSize = 16
	dev := k.Device()
	in := &variantInputs{bufs: dev.NewBuffers()}
	rng := rand.New(rand.NewPCG(uint64(s.batch), uint64(s.ctx)))
	maxBlocks := ceilDiv(s.ctx, pageSize)
	pages := int64(s.batch * maxBlocks)
	page := int64(pageSize * s.hkv * s.headDim * 2)
	kvBytes := 2 * pages * page
	in.copies = int(max(1, (4*int64(dev.Info().L2Bytes)+kvBytes-1)/kvBytes))
	pool := int64(in.copies) * pages * page
	var kPool, vPool cuda.DevicePtr
	var err error
	if order.interleaved() {
		pool *= 2
		if kPool, err = in.alloc(pool); err == nil {
			vPool = kPool.Add(page)
		}
	} else if kPool, err = in.alloc(pool); err == nil {
		vPool, err = in.alloc(pool)
	}
	if err != nil {
		in.free()
		return nil, err
	}
	const block = 32 << 20
	seed, err := in.alloc(block)
	if err != nil {
		in.free()
		return nil, err
	}
	if err := dev.CopyToDevice(seed, randomBF16Bytes(rng, block/2, 1)); err != nil {
		in.free()
		return nil, err
	}
	pools := []cuda.DevicePtr{kPool, vPool}
	if order.interleaved() {
		pools = pools[:1]
	}
	for _, dst := range pools {
		for off := int64(0); off < pool; off += block {
			if err := dev.CopyDevice(dst.Add(off), seed.Add((off/block)%7*2), min(block-16, pool-off), nil); err != nil {
				in.free()
				return nil, err
			}
		}
	}
	lens := make([]int32, s.batch)
	for i := range lens {
		lens[i] = int32(s.ctx)
	}
	dLens, err := in.alloc(int64(4 * s.batch))
	if err == nil {
		err = dev.CopyToDevice(dLens, cuda.Bytes(lens))
	}
	if err != nil {
		in.free()
		return nil, err
	}
	qBytes := int64(s.batch * s.hq * s.headDim * 2)
	for c := range in.copies {
		perm := pagePermutation(rng, int(pages), page, order)
		table := make([]int32, len(perm))
		for i, p := range perm {
			table[i] = int32(int64(c)*pages + int64(p))
			if order.interleaved() {
				table[i] *= 2
			}
		}
		tab, err := in.alloc(int64(4 * len(table)))
		if err == nil {
			err = dev.CopyToDevice(tab, cuda.Bytes(table))
		}
		var q, out cuda.DevicePtr
		if err == nil {
			q, err = in.alloc(qBytes)
		}
		if err == nil {
			err = dev.CopyToDevice(q, randomBF16Bytes(rng, int(qBytes/2), 3))
		}
		if err == nil {
			out, err = in.alloc(qBytes)
		}
		if err != nil {
			in.free()
			return nil, err
		}
		in.args = append(in.args, CUDADecodeArgs{
			Out: out, Q: q, KCache: kPool, VCache: vPool, BlockTables: tab, ContextLens: dLens,
			HostContextLens: lens, MaxBlocks: maxBlocks, NumHeads: s.hq, NumKVHeads: s.hkv,
			HeadDim: s.headDim, BlockSize: pageSize, DType: cuda.BFloat16,
			Scale: float32(1 / math.Sqrt(float64(s.headDim))),
		})
	}
	in.wsBytes = SplitKWorkspaceBytes(s.batch, s.hq, s.headDim, ceilDiv(s.ctx, 64))
	if in.ws, err = in.alloc(in.wsBytes); err != nil {
		in.free()
		return nil, err
	}
	return in, nil
}

// diagCut is a named tuning of a benchmark's variants.
type diagCut struct {
	name string
	t    CUDATuning
}

// decodeDiagCuts are the diagnostic cuts of the mma programs (CUDATuning.WithDiagnose) that the
// benchmarks add where the build has them (gollmdiag: decode_diag_cuda_bench_test.go); none otherwise.
var decodeDiagCuts []diagCut

// decodeDiagCut returns the cut named name ("entry", "loop", "nomerge"), if the build has it.
func decodeDiagCut(name string) (CUDATuning, bool) {
	for _, d := range decodeDiagCuts {
		if d.name == name {
			return d.t, true
		}
	}
	return CUDATuning{}, false
}

func randomBF16Bytes(rng *rand.Rand, n int, scale float32) []byte {
	f := make([]float32, n)
	for i := range f {
		f[i] = (rng.Float32()*2 - 1) * scale
	}
	out := make([]byte, 2*n)
	dtype.EncodeBF16(out, f)
	return out
}

// BenchmarkCUDADecodePages times the plan's call on the grid's shapes of at least 256 MB (and two small
// split-k ones) with the pages of every copy permuted (the grid's way, and a serving engine's after a
// while) and in order (each sequence's pages one contiguous run, as a contiguous cache would lay them
// out), each with K and V in two pools and with a page's K and V side by side in one (see pageOrder),
// alternating twice, with the spin: how much of the gap to contiguous SDPA the page order explains, and
// whether halving the 2 MiB regions a random page step touches (one for K and V instead of two) takes
// part of it back. It once ran with pages permuted within 2 MiB windows and windows shuffled
// (pagesLocal, pagesWindows) instead of the side-by-side layouts. Run it with -test.benchtime=1x.
func BenchmarkCUDADecodePages(b *testing.B) {
	k, t := benchTimer(b)
	for _, s := range []variantShape{
		{"mha", 256, 256, 12, 12, 128, false},
		{"mha", 32, 2048, 12, 12, 128, false},
		{"mha", 8, 8192, 12, 12, 128, false},
		{"mha", 1, 65536, 12, 12, 128, false},
		{"llama7b", 8, 2048, 32, 32, 128, false},
		{"llama7b", 8, 8192, 32, 32, 128, false},
		{"llama3", 64, 4096, 32, 8, 128, false},
		{"llama3", 1, 131072, 32, 8, 128, false},
		{"gqa", 1, 65536, 12, 2, 128, false},
		{"llama3", 1, 8192, 32, 8, 128, false},
	} {
		for round := range 2 {
			for _, order := range []pageOrder{pagesRandom, pagesSequential, pagesRandomKV, pagesSequentialKV} {
				in, err := newVariantInputs(k, s, order)
				if err != nil {
					b.Fatal(err)
				}
				reportUS(b, t, fmt.Sprintf("%s_b%d_ctx%d/pages=%v/r%d", s.name, s.batch, s.ctx, order, round), in.copies,
					func(c int) error {
						_, err := k.Decode(nil, &in.args[c], in.ws, in.wsBytes)
						return err
					})
				in.free()
			}
		}
	}
}

// readCeilingPTX is testdata/readceiling.cu compiled to PTX (the command is in the file), loaded through
// the driver by BenchmarkCUDAReadCeiling.
//
//go:embed testdata/readceiling.ptx
var readCeilingPTX []byte

// BenchmarkCUDAReadCeiling asks how fast any kernel could read a decode call's K and V where the grid's
// pages lie: a read-only kernel (testdata/readceiling.cu: 16-byte loads, nothing computed) reads whole
// pages through the block table, all KV heads of a page at once, in one wave of programs striding over the
// pages and with a program per page; for batches of 8 and more also in the decode kernels' order, a program
// per (KV head, sequence), with 8 or 16 pages' rows in flight. Each is timed with the pages permuted (the
// grid's layout) and in order (a contiguous cache's), next to the plan's decode call on the same pools and
// that call cut short after its tile loop (DiagnoseLoop: no merge, no output); two rounds, with the spin,
// the page reads and the calls after do_bench's flush too. Against contiguous SDPA in the same device call
// (scripts/bench/sdpa_peer.py) it says how far a paged kernel could go. Run it with -test.benchtime=1x.
func BenchmarkCUDAReadCeiling(b *testing.B) {
	k, t := benchTimer(b)
	mod, err := k.Device().LoadModule(readCeilingPTX)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mod.Unload() })
	read, err := mod.Function("gollm_read_pages")
	if err != nil {
		b.Fatal(err)
	}
	// The decode kernels' order: a program per (KV head, sequence), 8 or 16 pages' rows in flight.
	type headsKernel struct {
		what string
		fn   *cuda.Function
	}
	var headsKernels []headsKernel
	for _, v := range []string{"heads", "heads16"} {
		fn, err := mod.Function("gollm_read_" + v)
		if err != nil {
			b.Fatal(err)
		}
		headsKernels = append(headsKernels, headsKernel{v, fn})
	}
	const threads = 512
	perSM, err := read.Occupancy(threads, 0)
	if err != nil || perSM < 1 {
		b.Fatalf("read kernel occupancy %d: %v", perSM, err)
	}
	programs := k.numSMs * perSM // one wave: every program streams its share of the pages
	b.Logf("read kernel: %d programs of %d threads (%d an SM)", programs, threads, perSM)
	for _, s := range []variantShape{
		{"mha", 256, 256, 12, 12, 128, false},
		{"mha", 8, 8192, 12, 12, 128, false},
		{"mha", 1, 131072, 12, 12, 128, false},
		{"llama7b", 8, 2048, 32, 32, 128, false},
		{"llama7b", 8, 8192, 32, 32, 128, false},
		{"llama3", 32, 2048, 32, 8, 128, false},
		{"llama3", 1, 131072, 32, 8, 128, false},
		{"llama3", 64, 4096, 32, 8, 128, false},
		{"llama3", 128, 8192, 32, 8, 128, false},
		{"llama3", 1, 8192, 32, 8, 128, false},
		{"llama3", 8, 2048, 32, 8, 128, false},
		{"gqa", 16, 4096, 12, 2, 128, false},
	} {
		for round := range 2 {
			for _, order := range []pageOrder{pagesRandom, pagesSequential} {
				in, err := newVariantInputs(k, s, order)
				if err != nil {
					b.Fatal(err)
				}
				sink, err := in.alloc(16)
				if err != nil {
					in.free()
					b.Fatal(err)
				}
				a0 := in.args[0]
				pageVecs := a0.BlockSize * a0.NumKVHeads * a0.HeadDim * 2 / 16
				name := fmt.Sprintf("%s_b%d_ctx%d/pages=%v", s.name, s.batch, s.ctx, order)
				pages := len(a0.HostContextLens) * a0.MaxBlocks
				launchRead := func(grid int) func(c int) error {
					return func(c int) error {
						a := &in.args[c]
						p := struct {
							K, V, Table cuda.DevicePtr
							Pages       int32
							PageVecs    int32
							Out         cuda.DevicePtr
						}{a.KCache, a.VCache, a.BlockTables, int32(pages), int32(pageVecs), sink}
						return cuda.Launch(read, cuda.Dim3{X: grid}, cuda.Dim3{X: threads}, 0, nil, &p)
					}
				}
				// wave: one wave of programs, each taking every programs-th page; page: a program per
				// page, the hardware's scheduler evening out the end.
				for _, g := range []struct {
					what string
					grid int
				}{{"wave", min(programs, pages)}, {"page", pages}} {
					for _, flush := range []bool{false, true} {
						t.Flush = flush
						reportUS(b, t, fmt.Sprintf("%s/read-%s/flush=%v/r%d", name, g.what, flush, round), in.copies,
							launchRead(g.grid))
					}
				}
				for _, hk := range headsKernels {
					if s.batch < 8 {
						break // a few programs: not the grouped kernel's shape
					}
					t.Flush = false
					reportUS(b, t, fmt.Sprintf("%s/read-%s/flush=false/r%d", name, hk.what, round), in.copies, func(c int) error {
						a := &in.args[c]
						p := struct {
							K, V, Table                   cuda.DevicePtr
							MaxBlocks, RowStride, RowVecs int32
							Lbs                           int32
							Out                           cuda.DevicePtr
						}{a.KCache, a.VCache, a.BlockTables, int32(a.MaxBlocks), int32(a.NumKVHeads * a.HeadDim * 2 / 16),
							int32(a.HeadDim * 2 / 16), int32(bits.TrailingZeros(uint(a.BlockSize))), sink}
						return cuda.Launch(hk.fn, cuda.Dim3{X: a.NumKVHeads, Y: len(a.HostContextLens)}, cuda.Dim3{X: 128}, 0, nil, &p)
					})
				}
				variants := []diagCut{{"decode", CUDATuning{}}}
				if loop, ok := decodeDiagCut("loop"); ok {
					variants = append(variants, diagCut{"decode-loop", loop})
				}
				for _, v := range variants {
					v := struct {
						what string
						t    CUDATuning
					}{v.name, v.t}
					for _, flush := range []bool{false, true} {
						t.Flush = flush
						k.Tuning = v.t
						reportUS(b, t, fmt.Sprintf("%s/%s/flush=%v/r%d", name, v.what, flush, round), in.copies,
							func(c int) error {
								_, err := k.Decode(nil, &in.args[c], in.ws, in.wsBytes)
								return err
							})
					}
				}
				k.Tuning, t.Flush = CUDATuning{}, false
				in.free()
			}
		}
	}
}

// BenchmarkCUDASplitPartitions times the split-k kernel at forced partition lengths (whole tiles and the
// 80-, 144- and 208-token partitions Plan chose for small-KV-head models at long caps) on batch-1 shapes
// of TinyLlama and SmolLM2-135M / -360M (head_dim 64), two rounds, with the spin: whether GraphPlan
// should round Plan's partitions to whole tiles. Run it with -test.benchtime=1x.
func BenchmarkCUDASplitPartitions(b *testing.B) {
	k, t := benchTimer(b)
	for _, s := range []variantShape{
		{"tinyllama", 1, 4096, 32, 4, 64, false}, {"tinyllama", 1, 3000, 32, 4, 64, false},
		{"tinyllama", 1, 2100, 32, 4, 64, false}, {"tinyllama", 1, 8192, 32, 4, 64, false},
		{"tinyllama", 1, 5000, 32, 4, 64, false}, {"smollm135", 1, 4096, 9, 3, 64, false},
		{"smollm135", 1, 2500, 9, 3, 64, false}, {"smollm135", 1, 8192, 9, 3, 64, false},
		{"smollm360", 1, 8192, 15, 5, 64, false}, {"smollm360", 1, 5000, 15, 5, 64, false},
	} {
		in, err := newVariantInputs(k, s, pagesRandom)
		if err != nil {
			b.Fatal(err)
		}
		for round := range 2 {
			for _, pt := range []int{64, 80, 128, 144, 192, 208, 256} {
				reportUS(b, t, fmt.Sprintf("%s_b%d_ctx%d/p%d/r%d", s.name, s.batch, s.ctx, pt, round), in.copies,
					func(c int) error {
						return k.decodeSplitK(nil, &in.args[c], pt, in.ws, in.wsBytes, PathAuto, k.Tuning)
					})
			}
		}
		in.free()
	}
}
