//go:build cuda

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/model"
)

// benchShape is one entry of attention-shapes.json. Window, when positive, is a sliding window (a
// Mistral or Gemma layer's): each sequence's decode reads the pages from its window's first key on.
type benchShape struct {
	Name    string `json:"name"`
	Batch   int    `json:"batch"`
	Ctx     int    `json:"ctx"`
	Hq      int    `json:"hq"`
	Hkv     int    `json:"hkv"`
	HeadDim int    `json:"head_dim"`
	Window  int    `json:"window,omitempty"`
}

// readTokens is the tokens a decode of s reads per sequence: its context, or with a window its span
// from the page of the newest query's first key (attention.DecodeCall.ReadLens).
func (s benchShape) readTokens(pageSize int) int {
	if s.Window <= 0 {
		return s.Ctx
	}
	return s.Ctx - max(0, s.Ctx-s.Window)/pageSize*pageSize
}

type benchShapesFile struct {
	DType    string       `json:"dtype"`
	PageSize int          `json:"page_size"`
	Shapes   []benchShape `json:"shapes"`
}

// sweepPoint is one split-k partition size and its median time.
type sweepPoint struct {
	PartitionTokens int     `json:"partition_tokens"`
	Partitions      int     `json:"partitions"`
	Micros          float64 `json:"us"`
}

// attentionResult is one shape's measurements (times are medians in microseconds).
type attentionResult struct {
	benchShape
	PageSize        int          `json:"page_size"`
	KVBytes         int64        `json:"kv_bytes"` // the K and V the call reads (a window's span)
	Copies          int          `json:"copies"`
	GroupedKernel   string       `json:"grouped_kernel"`
	GroupedUS       float64      `json:"grouped_us"`
	GroupedFMAUS    float64      `json:"grouped_fma_us,omitempty"`
	SplitKUS        float64      `json:"splitk_us"`
	SplitKPartition int          `json:"splitk_partition_tokens"`
	SplitKParts     int          `json:"splitk_partitions"`
	SplitKSweep     []sweepPoint `json:"splitk_sweep"`
	PlanKernel      string       `json:"plan_kernel"`
	PlanPartition   int          `json:"plan_partition_tokens"`
	PlanParts       int          `json:"plan_partitions"`
	DispatchUS      float64      `json:"dispatch_us"`
	BWFraction      float64      `json:"bw_fraction"` // KV bytes / dispatch time / copy bandwidth
	// DispatchFlushUS is the dispatcher's time when zeros are written over a 256 MiB buffer before each
	// call (triton.testing.do_bench's L2 flush): L2 then holds dirty lines. The peers' figures in
	// attention-peers-h100.md were measured that way.
	DispatchFlushUS float64 `json:"dispatch_flush_us"`
	// HostUSPerRun is the host's time to queue one dispatcher call; it must stay below the GPU's time per
	// run (call + spacer) for the events to time the GPU alone.
	HostUSPerRun float64            `json:"host_us_per_run"`
	Experiments  map[string]float64 `json:"experiments,omitempty"`
}

// attentionReport is what --json writes.
type attentionReport struct {
	Device        string            `json:"device"`
	NumSMs        int               `json:"num_sms"`
	L2Bytes       int               `json:"l2_bytes"`
	Driver        int               `json:"driver"`
	Date          string            `json:"date"`
	Commit        string            `json:"commit,omitempty"`
	KVCacheDType  string            `json:"kv_cache_dtype"` // the pages' element type: bf16, or fp8 (e4m3, scales 1)
	Iters         int               `json:"iters"`
	Warmup        int               `json:"warmup"`
	CopyBandwidth float64           `json:"copy_bandwidth_bytes_per_s"`
	PeakBandwidth float64           `json:"peak_memory_bandwidth_bytes_per_s,omitempty"` // the driver's (Info.PeakMemBandwidth)
	Results       []attentionResult `json:"results"`
}

type benchAttentionOptions struct {
	shapes      string
	jsonOut     string
	iters       int
	warmup      int
	rotateMB    int
	spinUS      int
	experiments bool
	partitions  string
	only        string
	fma         bool
	commit      string
	device      int
	kvDType     string
}

func runBenchAttention(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("bench attention", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o benchAttentionOptions
	fs.StringVar(&o.shapes, "shapes", "scripts/bench/attention-shapes.json", "shape grid (JSON: dtype, page_size, shapes)")
	fs.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.IntVar(&o.iters, "iters", 100, "timed runs per kernel (median reported)")
	fs.IntVar(&o.warmup, "warmup", 10, "untimed runs first")
	fs.IntVar(&o.rotateMB, "rotate-mb", 0, "rotate among copies of the inputs until they total this many MB (default 4× L2)")
	fs.IntVar(&o.spinUS, "spin-us", 50, "a GPU spin of this many µs is queued before each timed run, so the host's launches stay ahead of the GPU")
	fs.BoolVar(&o.experiments, "experiments", false, "also time the grouped kernel under each CUDATuning switch")
	fs.StringVar(&o.partitions, "partitions", "64,128,256,512,1024,2048,4096,8192", "split-k partition sizes (tokens) to sweep")
	fs.StringVar(&o.only, "only", "", "comma-separated indices of the shapes to run (default all)")
	fs.BoolVar(&o.fma, "fma", false, "also time the grouped kernel's FMA path")
	fs.StringVar(&o.commit, "commit", "", "commit id recorded in the report")
	fs.IntVar(&o.device, "device", 0, "GPU ordinal")
	fs.StringVar(&o.kvDType, "kv-cache-dtype", model.KVCacheAuto, "the pages' element type: auto (the grid's, bf16) or fp8 (e4m3 codes, K and V scales 1)")
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		return 2
	}
	rep, err := benchAttention(ctx, &o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gollm bench attention: %v\n", err)
		return 1
	}
	printAttentionTable(stdout, rep)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", " ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "gollm bench attention: %v\n", err)
			return 1
		}
	}
	return 0
}

func benchAttention(ctx context.Context, o *benchAttentionOptions, log io.Writer) (*attentionReport, error) {
	raw, err := os.ReadFile(o.shapes)
	if err != nil {
		return nil, err
	}
	var grid benchShapesFile
	if err := json.Unmarshal(raw, &grid); err != nil {
		return nil, fmt.Errorf("%s: %w", o.shapes, err)
	}
	if grid.DType != "bf16" {
		return nil, fmt.Errorf("%s: dtype %q (only bf16 is benchmarked)", o.shapes, grid.DType)
	}
	kvDType := grid.DType
	switch o.kvDType {
	case "", model.KVCacheAuto:
	case model.KVCacheFP8, "fp8_e4m3":
		kvDType = model.KVCacheFP8
	default:
		return nil, fmt.Errorf("--kv-cache-dtype %q: supported: auto, fp8 (e4m3)", o.kvDType)
	}
	var sweep []int
	for _, f := range strings.Split(o.partitions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n%grid.PageSize != 0 {
			return nil, fmt.Errorf("--partitions: %q is not a positive multiple of the page size %d", f, grid.PageSize)
		}
		sweep = append(sweep, n)
	}
	selected := make([]int, 0, len(grid.Shapes))
	if o.only == "" {
		for i := range grid.Shapes {
			selected = append(selected, i)
		}
	} else {
		for _, f := range strings.Split(o.only, ",") {
			i, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || i < 0 || i >= len(grid.Shapes) {
				return nil, fmt.Errorf("--only: bad shape index %q", f)
			}
			selected = append(selected, i)
		}
	}

	dev, err := cuda.Open(o.device)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	kernels, err := attention.LoadCUDAKernels(dev)
	if err != nil {
		return nil, err
	}
	defer kernels.Close()
	info := dev.Info()
	rep := &attentionReport{Device: info.Name, NumSMs: info.NumSMs, L2Bytes: info.L2Bytes, Driver: info.DriverVersion,
		PeakBandwidth: info.PeakMemBandwidth, Date: time.Now().UTC().Format("2006-01-02"), Commit: o.commit, Iters: o.iters, Warmup: o.warmup,
		KVCacheDType: kvDType}
	b := &attentionBencher{dev: dev, k: kernels, o: o, log: log, fp8: kvDType == model.KVCacheFP8}
	if err := b.setup(); err != nil {
		return nil, err
	}
	defer b.close()
	if rep.CopyBandwidth, err = b.dev.CopyBandwidth(1 << 30); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "%s, %d SMs, copy bandwidth %.2f TB/s (peak %.2f by the driver)\n", info.Name, info.NumSMs,
		rep.CopyBandwidth/1e12, info.PeakMemBandwidth/1e12)
	for _, i := range selected {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := b.shape(grid.Shapes[i], grid.PageSize, sweep)
		if err != nil {
			return nil, fmt.Errorf("shape %d (%s b%d ctx%d): %w", i, grid.Shapes[i].Name, grid.Shapes[i].Batch, grid.Shapes[i].Ctx, err)
		}
		r.BWFraction = float64(r.KVBytes) / (r.DispatchUS * 1e-6) / rep.CopyBandwidth
		fmt.Fprintf(log, "%2d %-15s b%-3d ctx%-6d grouped %8.1f  split-k %8.1f (%d×%d)  plan %s %8.1f µs  %3.0f%%\n",
			i, r.Name, r.Batch, r.Ctx, r.GroupedUS, r.SplitKUS, r.SplitKParts, r.SplitKPartition, r.PlanKernel, r.DispatchUS, 100*r.BWFraction)
		rep.Results = append(rep.Results, *r)
	}
	return rep, nil
}

// attentionBencher holds what every shape's timing reuses: the event timer and its spacer buffers.
type attentionBencher struct {
	dev   *cuda.Device
	k     *attention.CUDAKernels
	o     *benchAttentionOptions
	log   io.Writer
	fp8   bool        // the pages hold e4m3 codes (--kv-cache-dtype fp8)
	timer *cuda.Timer // spin (or, with Flush, do_bench's 256 MiB zeroing) before each timed run; see cuda.Timer
}

func (b *attentionBencher) setup() (err error) {
	b.timer, err = b.dev.NewTimer(b.o.iters, b.o.warmup, uint64(b.o.spinUS)*1000)
	return err
}

func (b *attentionBencher) close() { b.timer.Close() }

// shapeInputs are the device buffers of one shape: copies of the paged K/V (one pool, each copy's pages
// in its own range, scattered by a random permutation), block tables, queries and outputs.
type shapeInputs struct {
	bufs               *cuda.Buffers
	args               []attention.CUDADecodeArgs
	workspace          cuda.DevicePtr
	workspaceBytes     int64
	kvBytesPerCopy     int64
	copies, maxBlocks  int
	hostLens           []int32
	pagesPerCopy, page int64
}

func (in *shapeInputs) alloc(n int64) (cuda.DevicePtr, error) { return in.bufs.Alloc(n) }
func (in *shapeInputs) free()                                 { _ = in.bufs.Free() }

// kvElemBytes is the bytes of one stored K or V element: 1 over FP8 pages, else bf16's 2.
func (b *attentionBencher) kvElemBytes() int64 {
	if b.fp8 {
		return 1
	}
	return 2
}

// randomE4M3 returns n e4m3 codes of values uniform in [-scale, scale].
func randomE4M3(rng *rand.Rand, n int, scale float32) []byte {
	f := make([]float32, n)
	for i := range f {
		f[i] = (rng.Float32()*2 - 1) * scale
	}
	out := make([]byte, n)
	dtype.EncodeE4M3Sat(out, f, 1)
	return out
}

// randomBF16 returns n bf16 values uniform in [-scale, scale].
func randomBF16(rng *rand.Rand, n int, scale float32) []byte {
	f := make([]float32, n)
	for i := range f {
		f[i] = (rng.Float32()*2 - 1) * scale
	}
	out := make([]byte, 2*n)
	dtype.EncodeBF16(out, f)
	return out
}

func (b *attentionBencher) inputs(s benchShape, pageSize int, maxPartitions int) (*shapeInputs, error) {
	in := &shapeInputs{bufs: b.dev.NewBuffers()}
	rng := rand.New(rand.NewPCG(uint64(s.Batch), uint64(s.Ctx*1000+s.Hkv)))
	in.maxBlocks = (s.Ctx + pageSize - 1) / pageSize
	in.pagesPerCopy = int64(s.Batch * in.maxBlocks)
	in.page = int64(pageSize*s.Hkv*s.HeadDim) * b.kvElemBytes()
	in.kvBytesPerCopy = 2 * in.pagesPerCopy * in.page
	rotate := int64(b.o.rotateMB) << 20
	if rotate == 0 {
		rotate = 4 * int64(b.dev.Info().L2Bytes)
	}
	in.copies = int(max(1, (rotate+in.kvBytesPerCopy-1)/in.kvBytesPerCopy))
	pool := int64(in.copies) * in.pagesPerCopy * in.page
	kPool, err := in.alloc(pool)
	if err != nil {
		return nil, err
	}
	vPool, err := in.alloc(pool)
	if err != nil {
		return nil, err
	}
	// Fill K and V from a 32 MiB random block repeated (the values only need to be real, not unique).
	const block = 32 << 20
	seed, err := in.alloc(block)
	if err != nil {
		return nil, err
	}
	fill := randomBF16(rng, block/2, 1)
	if b.fp8 {
		fill = randomE4M3(rng, block, 1)
	}
	if err := b.dev.CopyToDevice(seed, fill); err != nil {
		return nil, err
	}
	for _, dst := range []cuda.DevicePtr{kPool, vPool} {
		for off := int64(0); off < pool; off += block {
			if err := b.dev.CopyDevice(dst.Add(off), seed.Add((off/block)%7*2), min(block-16, pool-off), nil); err != nil {
				return nil, err
			}
		}
	}
	in.hostLens = make([]int32, s.Batch)
	for i := range in.hostLens {
		in.hostLens[i] = int32(s.Ctx)
	}
	lens, err := in.alloc(int64(4 * s.Batch))
	if err != nil {
		return nil, err
	}
	if err := b.dev.CopyToDevice(lens, cuda.Bytes(in.hostLens)); err != nil {
		return nil, err
	}
	qBytes := int64(s.Batch * s.Hq * s.HeadDim * 2)
	for c := range in.copies {
		perm := rng.Perm(int(in.pagesPerCopy))
		table := make([]int32, len(perm))
		for i, p := range perm {
			table[i] = int32(int64(c)*in.pagesPerCopy + int64(p))
		}
		tab, err := in.alloc(int64(4 * len(table)))
		if err != nil {
			return nil, err
		}
		if err := b.dev.CopyToDevice(tab, cuda.Bytes(table)); err != nil {
			return nil, err
		}
		q, err := in.alloc(qBytes)
		if err != nil {
			return nil, err
		}
		if err := b.dev.CopyToDevice(q, randomBF16(rng, int(qBytes/2), 3)); err != nil {
			return nil, err
		}
		out, err := in.alloc(qBytes)
		if err != nil {
			return nil, err
		}
		in.args = append(in.args, attention.CUDADecodeArgs{
			Out: out, Q: q, KCache: kPool, VCache: vPool, BlockTables: tab, ContextLens: lens,
			HostContextLens: in.hostLens, MaxBlocks: in.maxBlocks, NumHeads: s.Hq, NumKVHeads: s.Hkv,
			HeadDim: s.HeadDim, BlockSize: pageSize, DType: cuda.BFloat16,
			Scale: float32(1 / math.Sqrt(float64(s.HeadDim))), Window: s.Window,
			KVFP8: b.fp8, KScale: 1, VScale: 1,
		})
	}
	// The partials of the sweep's finest split, and of any split the dispatcher plans (SplitKWorkspaceBound:
	// its partitions may be single 64-token tiles).
	in.workspaceBytes = max(attention.SplitKWorkspaceBytes(s.Batch, s.Hq, s.HeadDim, maxPartitions),
		attention.SplitKWorkspaceBound(s.Batch, s.Hq, s.HeadDim, s.Ctx))
	if in.workspace, err = in.alloc(in.workspaceBytes); err != nil {
		return nil, err
	}
	return in, nil
}

func (b *attentionBencher) shape(s benchShape, pageSize int, sweep []int) (*attentionResult, error) {
	maxParts := 1
	for _, p := range sweep {
		maxParts = max(maxParts, (s.Ctx+p-1)/p)
	}
	in, err := b.inputs(s, pageSize, maxParts)
	if err != nil {
		return nil, err
	}
	defer in.free()
	read := s.readTokens(pageSize)
	r := &attentionResult{benchShape: s, PageSize: pageSize, KVBytes: int64(s.Batch) * int64(read) * int64(s.Hkv) * int64(s.HeadDim) * 2 * b.kvElemBytes(),
		Copies: in.copies}
	kinfo, err := b.k.Describe("DecodeGrouped", &in.args[0], attention.PathAuto)
	if err != nil {
		return nil, err
	}
	r.GroupedKernel = kinfo.Name
	if r.GroupedUS, err = b.timer.Median(in.copies, func(c int) error {
		return b.k.DecodeGrouped(nil, &in.args[c], attention.PathAuto)
	}); err != nil {
		return nil, err
	}
	if b.o.fma {
		if r.GroupedFMAUS, err = b.timer.Median(in.copies, func(c int) error {
			return b.k.DecodeGrouped(nil, &in.args[c], attention.PathFMA)
		}); err != nil {
			return nil, err
		}
	}
	plan, err := b.k.Plan(&in.args[0])
	if err != nil {
		return nil, err
	}
	r.PlanKernel, r.PlanPartition, r.PlanParts = plan.Kernel.String(), plan.PartitionTokens, plan.NumPartitions
	points := slices.Clone(sweep)
	if plan.Kernel == attention.SplitK && !slices.Contains(points, plan.PartitionTokens) {
		points = append(points, plan.PartitionTokens)
	}
	for _, part := range points {
		if part >= read {
			continue
		}
		us, err := b.timer.Median(in.copies, func(c int) error {
			return b.k.DecodeSplitK(nil, &in.args[c], part, in.workspace, in.workspaceBytes, attention.PathAuto)
		})
		if err != nil {
			return nil, err
		}
		pt := sweepPoint{PartitionTokens: part, Partitions: (read + part - 1) / part, Micros: us}
		r.SplitKSweep = append(r.SplitKSweep, pt)
		if r.SplitKUS == 0 || us < r.SplitKUS {
			r.SplitKUS, r.SplitKPartition, r.SplitKParts = us, pt.PartitionTokens, pt.Partitions
		}
	}
	dispatch := func(c int) error {
		_, err := b.k.Decode(nil, &in.args[c], in.workspace, in.workspaceBytes)
		return err
	}
	if r.DispatchUS, err = b.timer.Median(in.copies, dispatch); err != nil {
		return nil, err
	}
	r.HostUSPerRun = b.timer.HostUS
	b.timer.Flush = true
	r.DispatchFlushUS, err = b.timer.Median(in.copies, dispatch)
	b.timer.Flush = false
	if err != nil {
		return nil, err
	}
	if b.o.experiments {
		r.Experiments = map[string]float64{}
		for _, e := range []struct {
			name string
			t    attention.CUDATuning
		}{
			{"default", attention.CUDATuning{}},
			{"sequence_major", attention.CUDATuning{SequenceMajor: true}},
			{"evict_first_large", attention.CUDATuning{EvictFirstLarge: true}},
			{"no_evict_first", attention.CUDATuning{NoEvictFirst: true}},
			{"no_narrow", attention.CUDATuning{NoNarrow: true}},
			{"fma", attention.CUDATuning{}},
		} {
			path := attention.PathAuto
			if e.name == "fma" {
				path = attention.PathFMA
			}
			b.k.Tuning = e.t
			us, err := b.timer.Median(in.copies, func(c int) error {
				return b.k.DecodeGrouped(nil, &in.args[c], path)
			})
			b.k.Tuning = attention.CUDATuning{}
			if err != nil {
				continue // a variant that does not exist for this shape
			}
			r.Experiments["grouped/"+e.name] = us
			if plan.Kernel == attention.SplitK && path == attention.PathAuto {
				b.k.Tuning = e.t
				us, err := b.timer.Median(in.copies, dispatch)
				b.k.Tuning = attention.CUDATuning{}
				if err == nil {
					r.Experiments["dispatch/"+e.name] = us
				}
			}
		}
	}
	return r, nil
}

func printAttentionTable(w io.Writer, rep *attentionReport) {
	fmt.Fprintf(w, "# %s (%d SMs), driver %d, %s, commit %s; %s pages; copy bandwidth %.2f TB/s; median of %d runs\n",
		rep.Device, rep.NumSMs, rep.Driver, rep.Date, rep.Commit, rep.KVCacheDType, rep.CopyBandwidth/1e12, rep.Iters)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tB\tctx\twindow\tHq\tHkv\td\tKV MB\tgrouped µs\tsplit-k µs (parts)\tplan\tplan µs\t%BW\tflushed µs\thost µs\t")
	for _, r := range rep.Results {
		plan := r.PlanKernel
		if r.PlanParts > 1 {
			plan = fmt.Sprintf("%s×%d", plan, r.PlanParts)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f (%d)\t%s\t%.1f\t%.0f%%\t%.1f\t%.1f\t\n", r.Name, r.Batch, r.Ctx,
			r.Window, r.Hq, r.Hkv, r.HeadDim, float64(r.KVBytes)/1e6, r.GroupedUS, r.SplitKUS, r.SplitKParts, plan, r.DispatchUS, 100*r.BWFraction,
			r.DispatchFlushUS, r.HostUSPerRun)
	}
	tw.Flush()
}
