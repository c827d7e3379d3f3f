//go:build cuda

package attention

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
)

// sharedTensorFLOPS is the H200's dense bf16 tensor-core peak (FLOP/s, 989 TFLOPS): once the K/V are read
// once, a large group's Q·Kᵀ and P·V (4·batch·heads·context·head_dim FLOPs) take about as long.
const sharedTensorFLOPS = 989e12

// BenchmarkCUDADecodeShared times decode attention at Llama-3-8B's heads (32 query heads, 8 KV heads,
// head_dim 128, bf16, pages of 16) for 64 sequences that share a prefix of 4k, 16k and 64k tokens and
// have 128 tokens of their own: the plain call (Decode, the dispatcher's kernel) and the shared-prefix
// call (DecodeShared with DecideShared's plan) in the same run, pages permuted, inputs rotated among
// copies totalling 4× L2. One line per shape: plain_us, shared_us, bound_us (the unique K/V bytes, the
// prefix once and every suffix, over copy_TB/s: the device-to-device copy bandwidth, measured at the
// start as gollm bench measures it), flop_us (the products at the tensor cores' peak: at 16k tokens
// about three quarters of bound_us, so the shared call is as much compute as copy), shared/bound and
// plain/shared, shared_serial_us (CUDATuning.SharedSerial: the suffix pass after the prefix pass on one
// stream), gather_us, prefix_us, suffix_us and merge_us (each of the call's launches alone), and
// shared_<variant>_us: the shared call on each of shared.cu's prefix kernels (SharedPrefixVariant;
// shared_us runs the Hopper prefix kernel where it is loaded). The _e4m3 lines are
// the same calls over FP8 pages (their bound counts a byte an element; one variant: shared.cu's one FP8
// prefix kernel, W32's, beside the Hopper kernel's FP8 form in shared_us), on devices that have FP8 KV
// kernels.
// Run it with -test.benchtime=1x (b.N is not the number of calls timed). The targets of shared/bound and
// plain/shared, and the measured values, are in docs/bench/shared-prefix-h200.md.
func BenchmarkCUDADecodeShared(b *testing.B) {
	k, t := benchTimer(b)
	bw, err := k.Device().CopyBandwidth(1 << 30)
	if err != nil {
		b.Fatal(err)
	}
	info := k.Device().Info()
	for _, kv := range []string{"", "_e4m3"} {
		if kv != "" && info.Major*10+info.Minor < 89 {
			continue
		}
		fp8 := kv != ""
		for _, prefix := range []int{4096, 16384, 65536} {
			in, err := newSharedBenchInputs(k, 64, prefix, 128, fp8)
			if err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("llama3_b64_prefix%d_suffix128%s", prefix, kv)
			if !in.decision.Use {
				in.bufs.Free()
				b.Fatalf("%s: DecideShared does not take the shared path", name)
			}
			plain, err := t.Median(in.copies, func(c int) error {
				_, err := k.Decode(nil, &in.args[c], in.ws, in.wsBytes)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			shared, err := t.Median(in.copies, func(c int) error {
				return k.DecodeShared(nil, &in.args[c], in.shared[c], in.sws, in.swsBytes)
			})
			if err != nil {
				b.Fatal(err)
			}
			// The serial call (the suffix pass after the prefix pass, on one stream), and each of the
			// call's launches alone (the sum against shared_us is what the fork and the launch gaps make).
			tuning := k.Tuning
			k.Tuning.SharedSerial = true
			serial, err := t.Median(in.copies, func(c int) error {
				return k.DecodeShared(nil, &in.args[c], in.shared[c], in.sws, in.swsBytes)
			})
			k.Tuning = tuning
			if err != nil {
				b.Fatal(err)
			}
			var stages [numSharedStages]float64
			for i := range stages {
				stages[i], err = t.Median(in.copies, func(c int) error {
					st, err := k.sharedStages(&in.args[c], in.shared[c], in.sws, in.swsBytes, k.Tuning)
					if err != nil {
						return err
					}
					return st[i](nil)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			// The shared call on each of shared.cu's prefix kernels (CUDATuning.SharedPrefix; shared_us is
			// k.Tuning's), each with DecideShared's layout for it (the members of its program's rows); over
			// FP8 pages its one FP8 kernel (W32's).
			in.bufs.Free()
			variants := []SharedPrefixVariant{SharedPrefixW32}
			if !fp8 {
				variants = nil
				for v := range numSharedPrefixVariants {
					variants = append(variants, v)
				}
			}
			times := make([]float64, len(variants))
			for i, v := range variants {
				k.Tuning.SharedPrefix, k.Tuning.NoSM90Prefix = v, true
				vin, err := newSharedBenchInputs(k, 64, prefix, 128, fp8)
				if err == nil && !vin.decision.Use {
					vin.bufs.Free()
					err = fmt.Errorf("DecideShared does not take the shared path")
				}
				if err == nil {
					times[i], err = t.Median(vin.copies, func(c int) error {
						return k.DecodeShared(nil, &vin.args[c], vin.shared[c], vin.sws, vin.swsBytes)
					})
					vin.bufs.Free()
				}
				k.Tuning = tuning
				if err != nil {
					b.Fatalf("%s, prefix kernel %v: %v", name, v, err)
				}
			}
			bound := in.uniqueBytes / bw * 1e6
			flops := 4 * float64(64*32*(prefix+128)*128) / sharedTensorFLOPS * 1e6
			b.Run(name, func(b *testing.B) {
				b.ReportMetric(plain, "plain_us")
				b.ReportMetric(shared, "shared_us")
				b.ReportMetric(serial, "shared_serial_us")
				for i, name := range []string{"gather", "prefix", "suffix", "merge"} {
					b.ReportMetric(stages[i], name+"_us")
				}
				for i, v := range variants {
					b.ReportMetric(times[i], "shared_"+v.String()+"_us")
				}
				b.ReportMetric(bound, "bound_us")
				b.ReportMetric(bw/1e12, "copy_TB/s")
				b.ReportMetric(flops, "flop_us")
				b.ReportMetric(shared/bound, "shared/bound")
				b.ReportMetric(plain/shared, "plain/shared")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// sharedBenchInputs are copies of one shared-prefix batch: a pool per copy holding the prefix's pages
// and every suffix's, in a random order, with its tables, plain args and shared args.
type sharedBenchInputs struct {
	bufs        *cuda.Buffers
	copies      int
	args        []CUDADecodeArgs
	shared      []*CUDASharedArgs
	decision    SharedDecision
	ws, sws     cuda.DevicePtr
	wsBytes     int64
	swsBytes    int64
	uniqueBytes float64
}

// newSharedBenchInputs lays out batch sequences behind prefix shared tokens with suffix of their own,
// over bf16 pages or, with fp8, FP8 ones.
func newSharedBenchInputs(k *CUDAKernels, batch, prefix, suffix int, fp8 bool) (*sharedBenchInputs, error) {
	const page, hq, hkv, d = 16, 32, 8, 128
	elem := int64(2)
	if fp8 {
		elem = 1
	}
	dev := k.Device()
	in := &sharedBenchInputs{bufs: dev.NewBuffers()}
	fail := func(err error) (*sharedBenchInputs, error) { _ = in.bufs.Free(); return nil, err }
	rng := rand.New(rand.NewPCG(uint64(batch), uint64(prefix)))
	prefixPages, suffixPages := prefix/page, ceilDiv(suffix, page)
	pages := prefixPages + batch*suffixPages
	pageBytes := int64(page*hkv*d) * elem
	in.uniqueBytes = float64(2 * int64(prefix+batch*suffix) * int64(hkv*d) * elem)
	in.copies = int(max(1, (4*int64(dev.Info().L2Bytes)+2*int64(pages)*pageBytes-1)/(2*int64(pages)*pageBytes)))
	maxBlocks := prefixPages + suffixPages
	lens := make([]int32, batch)
	groups := []SharedGroup{{Pages: prefixPages}}
	for s := range lens {
		lens[s] = int32(prefix + suffix)
		groups[0].Seqs = append(groups[0].Seqs, int32(s))
	}
	call := CUDADecodeArgs{HostContextLens: lens, MaxBlocks: maxBlocks, NumHeads: hq, NumKVHeads: hkv, HeadDim: d,
		BlockSize: page, DType: cuda.BFloat16, Scale: 0.088}
	fill := uint32(0x3c003c00) // bf16 pairs of about 0.008
	if fp8 {
		call.KVFP8, call.KScale, call.VScale = true, 1.0/64, 1.0/64
		fill = 0x30303030 // e4m3 codes of 0.5: 0.008 at a scale of 1/64
	}
	in.decision = k.DecideShared(&call, groups)
	if !in.decision.Use {
		return in, nil
	}
	l, plan := in.decision.Layout, in.decision.Plan
	alloc := func(n int64) cuda.DevicePtr {
		p, err := in.bufs.Alloc(n)
		if err != nil {
			panic(err)
		}
		return p
	}
	upload := func(x []int32) (cuda.DevicePtr, error) {
		p := alloc(int64(4 * max(1, len(x))))
		return p, dev.CopyToDevice(p, cuda.Bytes(x))
	}
	defer func() {
		if r := recover(); r != nil {
			_ = in.bufs.Free()
			panic(r)
		}
	}()
	pool := int64(in.copies) * int64(pages) * pageBytes
	kPool, vPool := alloc(pool), alloc(pool)
	for _, p := range []cuda.DevicePtr{kPool, vPool} {
		if err := dev.Fill32(p, fill, pool/4, nil); err != nil {
			return fail(err)
		}
	}
	qBytes := int64(batch * hq * d * 2)
	q, out := alloc(qBytes), alloc(qBytes)
	if err := dev.Fill32(q, 0x3f803f80, qBytes/4, nil); err != nil { // bf16 ones
		return fail(err)
	}
	lensDev, err := upload(lens)
	if err != nil {
		return fail(err)
	}
	in.wsBytes = SplitKWorkspaceBound(batch, hq, d, prefix+suffix)
	in.ws = alloc(in.wsBytes)
	in.swsBytes = SharedWorkspaceBytes(l, plan, hq, hkv, d, 2)
	in.sws = alloc(in.swsBytes)
	for c := range in.copies {
		perm := rng.Perm(pages)
		base := int32(c * pages)
		tables := make([][]int32, batch)
		flat := make([]int32, batch*maxBlocks)
		for s := range tables {
			table := make([]int32, 0, maxBlocks)
			for i := range prefixPages {
				table = append(table, base+int32(perm[i]))
			}
			for i := range suffixPages {
				table = append(table, base+int32(perm[prefixPages+s*suffixPages+i]))
			}
			tables[s] = table
			copy(flat[s*maxBlocks:], table)
		}
		tab, err := upload(flat)
		if err != nil {
			return fail(err)
		}
		a := call
		a.Out, a.Q, a.KCache, a.VCache, a.BlockTables, a.ContextLens = out, q, kPool, vPool, tab, lensDev
		in.args = append(in.args, a)
		sh := &CUDASharedArgs{Layout: l, Plan: plan}
		for _, x := range []struct {
			dst *cuda.DevicePtr
			src []int32
		}{
			{&sh.VirtualSeqs, l.VirtualSeqs}, {&sh.SeqSlot, l.SeqSlot}, {&sh.VirtualLens, l.VirtualLens},
			{&sh.SuffixLens, l.SuffixLens}, {&sh.VirtualTables, l.VirtualTables(tables, maxBlocks)},
			{&sh.SuffixTables, l.SuffixTables(tables, page, maxBlocks)},
		} {
			if *x.dst, err = upload(x.src); err != nil {
				return fail(err)
			}
		}
		in.shared = append(in.shared, sh)
	}
	return in, nil
}

// BenchmarkCUDADecodeSharedTimeline is BenchmarkCUDADecodeShared's call (4k and 16k shared tokens) with
// events recorded between its launches: when the prefix pass, the suffix pass, the join and the merge are
// done, µs after the call's first event (the median of 21 calls, each queued behind a plain call so that
// the launches wait on the GPU, not the host), forked as DecodeShared runs it and serial (prefix, suffix,
// merge on one stream). It shows whether the suffix pass runs beside the prefix pass
// (docs/bench/shared-prefix-h200.md, "Inside the call").
//
//	(cd attention && go test -tags cuda -run XXX -bench CUDADecodeSharedTimeline -benchtime 1x)
func BenchmarkCUDADecodeSharedTimeline(b *testing.B) {
	k, _ := benchTimer(b)
	dev := k.Device()
	const runs = 21
	events := make([][5]*cuda.Event, runs) // start, prefix done, suffix done, joined, merge done
	for i := range events {
		for j := range events[i] {
			e, err := dev.NewEvent()
			if err != nil {
				b.Fatal(err)
			}
			defer e.Destroy()
			events[i][j] = e
		}
	}
	for _, prefix := range []int{4096, 16384} {
		in, err := newSharedBenchInputs(k, 64, prefix, 128, false)
		if err != nil {
			b.Fatal(err)
		}
		if err := k.DecodeShared(nil, &in.args[0], in.shared[0], in.sws, in.swsBytes); err != nil { // the side stream
			b.Fatal(err)
		}
		for _, serial := range []bool{false, true} {
			var done [4][]float64
			for i := range runs {
				c := i % in.copies
				st, err := k.sharedStages(&in.args[c], in.shared[c], in.sws, in.swsBytes, k.Tuning)
				if err == nil {
					_, err = k.Decode(nil, &in.args[(c+1)%in.copies], in.ws, in.wsBytes) // what the call waits behind
				}
				if err == nil {
					err = timeline(k, st, events[i], serial)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := dev.Synchronize(); err != nil {
				b.Fatal(err)
			}
			for i := range runs {
				for j := range done {
					ms, err := events[i][0].Elapsed(events[i][j+1])
					if err != nil {
						b.Fatal(err)
					}
					done[j] = append(done[j], ms*1e3)
				}
			}
			b.Run(fmt.Sprintf("prefix%d/serial=%v", prefix, serial), func(b *testing.B) {
				for j, name := range []string{"prefix", "suffix", "joined", "merge"} {
					slices.Sort(done[j])
					b.ReportMetric(done[j][runs/2], name+"_done_us")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
		in.bufs.Free()
	}
}

// timeline queues shared-prefix stages st on the legacy stream as DecodeShared does (forkShared: the
// suffix pass first, on k's side stream, joined before the merge) or serially (prefix, suffix, merge),
// recording ev[0] before them and ev[1:5] after the prefix pass, the suffix pass, the join and the merge.
func timeline(k *CUDAKernels, st [numSharedStages]sharedStage, ev [5]*cuda.Event, serial bool) error {
	prefix := []func() error{
		func() error { return st[sharedGatherStage](nil) },
		func() error { return st[sharedPrefixStage](nil) },
		func() error { return ev[1].Record(nil) },
	}
	side := k.fork.side
	if serial {
		side = nil
	}
	suffix := []func() error{
		func() error { return k.fork.begin.Record(nil) },
		func() error { return side.Wait(k.fork.begin) },
		func() error { return st[sharedSuffixStage](side) },
		func() error { return ev[2].Record(side) },
		func() error { return k.fork.end.Record(side) },
	}
	steps := []func() error{func() error { return ev[0].Record(nil) }}
	if serial {
		steps = append(append(steps, prefix...), suffix...)
	} else {
		steps = append(append(steps, suffix...), prefix...)
	}
	steps = append(steps,
		func() error { return (*cuda.Stream)(nil).Wait(k.fork.end) },
		func() error { return ev[3].Record(nil) },
		func() error { return st[sharedMergeStage](nil) },
		func() error { return ev[4].Record(nil) })
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
