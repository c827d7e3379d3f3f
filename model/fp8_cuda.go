//go:build cuda

package model

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/model/kernels"
	"github.com/gollm/gollm/weights"
)

// FP8 weights on the CUDA backend (kernels/fp8.cu): UploadFP8 keeps a Linear layer's e4m3 codes (one
// byte an element) and its float32 row scales on the device, and MatMul with it runs two kernels: one
// quantizes the input rows to e4m3 with their scales (static, or per row as FP8Weight defines), the
// other streams the weight codes through the tensor cores and applies s[r]·sw[o] and the bias in its
// epilogue. The plan fuses nothing into these products (stepOp.fp8). FP8 weights need compute
// capability 8.9 or newer (Ada, Hopper: the e4m3 conversions in hardware).
//
// An FP8 KV cache (Shape.KVCacheDType KVCacheFP8) keeps its pages as e4m3 codes, one byte an element:
// the RoPE kernel (RoPEWriteKV_<dtype>_e4m3) stores e4m3(x / scale) with the layer's KVScales, the decode
// kernels and the prefill kernels (their _e4m3 entry points: on the tensor cores, the codes converted to
// the compute dtype exactly, where one serves the call; FMA otherwise) read float(code) · scale. The plan then fuses no RoPE into the Q/K/V product or decode attention (their
// epilogues write compute-dtype pages) and never takes the shared-prefix path. It needs compute
// capability 8.9 or newer too (the conversions in hardware; the kernels are tested there only).

// fp8MinComputeCapability is the least compute capability (major·10 + minor) that runs FP8 weights.
const fp8MinComputeCapability = 89

// cudaFP8 is an FP8 weight on the device: codes [rowsPad][colsPad] (zero codes in the padding), scales
// [rowsPad] float32 (1 in the padding), and the static input scale (0: per row).
type cudaFP8 struct {
	scales           cuda.DevicePtr
	inputScale       float32
	rowsPad, colsPad int
}

// fp8State is the backend's FP8 kernels (loaded at the first FP8 upload) and the quantized input rows'
// workspace.
type fp8State struct {
	quantize *cuda.Function
	matmul   [4]*cuda.Function // by token tiles: 1, 2, 4, 8
	// mma is MatMulE4M3mma_nt<NT> (kernels/fp8_sm90.cu, module mmaMod), by token tiles as matmul: the
	// product on Hopper's e4m3 mma.sync, in place of matmul; nil elsewhere, or where the driver did not
	// load it.
	mma    [4]*cuda.Function
	mmaMod *cuda.Module
	// gemm is GemmBulk_e4m3_nt<NT> (kernels/gemm_sm90.cu, module gemmMod), by 16-token tiles (1 … 4): the
	// products of 9-64 rows on Hopper's e4m3 wgmma (pathFP8Gemm); nil elsewhere, or where the driver did
	// not load it. gemmShare is the shared memory a block may have.
	gemm      [4]*cuda.Function
	gemmMod   *cuda.Module
	gemmShare int
	scale     *cuda.Function // ScaleE4M3: the epilogue of cuBLASLt's product
	// quantizeRows is QuantizeE4M3's register kernels, by fp8RowShapes.
	quantizeRows [len(fp8RowShapes)]*cuda.Function
	// norm and swiglu are the producers with the quantization fused in (NormE4M3, SwiGLUE4M3_<dtype>),
	// in every form; their staged kernels may hold stageMax bytes of shared memory. swiglu16 is
	// SwiGLUE4M3_<dtype>_in16, the SwiGLU over bfloat16 gate/up sums (opPlan.fp8In16), loaded for 16-bit
	// compute alone.
	norm, swiglu, swiglu16 fp8Forms
	stageMax               int
	// lt is cuBLASLt (nil where it could not be loaded: every FP8 product then runs MatMulE4M3);
	// ltScaled: it applies the row scales itself (outer-vector scaling, checked at load by probeLt), so
	// ScaleE4M3 does not run.
	lt       *cuda.BLASLt
	ltScaled bool
	// codes holds up to codesCap bytes of quantized input rows, scales scalesCap rows' scales, x16 the
	// codes' f16 values for up to fp8TileRows rows (x16Cap bytes: fp8ReadsX16).
	codes, scales, x16          cuda.DevicePtr
	codesCap, scalesCap, x16Cap int64
}

// fp8Forms is one quantizing kernel's forms (fp8FusedForm): the loop kernel, the register kernels by
// fp8RowShapes, the staged kernel.
type fp8Forms struct {
	loop   *cuda.Function
	rows   [len(fp8RowShapes)]*cuda.Function
	staged *cuda.Function
}

// fp8Params and fp8QuantizeParams mirror MatMulE4M3Params and QuantizeE4M3Params of kernels/fp8.cu.
type fp8Params struct {
	Y, XQ, W, SX, SW, Bias cuda.DevicePtr
	M, N, KP               int32
	KS                     int32
	Tiles                  int32
}

type fp8ScaleParams struct {
	Y, SX, SW, Bias cuda.DevicePtr
	M, N            int32
}

// launchScaleE4M3 queues ScaleE4M3 over rows rows of n (a multiple of 4) outputs: grid x the columns,
// four a thread, y the rows (a block scales every gridDim.y-th).
func (b *cudaBackend) launchScaleE4M3(s fp8ScaleParams) error {
	if s.N%4 != 0 || (s.Y|s.SW|s.Bias)%16 != 0 {
		return fmt.Errorf("cuda backend: fp8 scaling pass over %d columns at %#x (scales %#x, bias %#x): not 16-byte aligned",
			s.N, s.Y, s.SW, s.Bias)
	}
	grid := cuda.Dim3{X: (int(s.N)/4 + 255) / 256, Y: min(int(s.M), 65535)}
	return cuda.Launch(b.fp8.scale, grid, cuda.Dim3{X: 256}, 0, b.stream, &s)
}

// fp8FusedParams mirrors FusedE4M3Params of kernels/fp8.cu.
type fp8FusedParams struct {
	Codes, X16, Scales, Residual, Add, Weight cuda.DevicePtr
	InSX, InSW                                cuda.DevicePtr
	Eps, InputScale, MinScale                 float32
	Cols, KP                                  int32
}

type fp8QuantizeParams struct {
	Codes, X16, Scales, X cuda.DevicePtr
	InputScale, MinScale  float32
	K, KP                 int32
}

// checkFP8 returns an error naming the FP8 features a model with fp8Weights and the KV pages of s needs
// that this device or backend lacks.
func (b *cudaBackend) checkFP8(fp8Weights bool, s Shape) error {
	var missing []string
	if fp8Weights {
		if m := fp8WeightsMissing(b.dev.Info()); m != "" {
			missing = append(missing, m)
		}
	}
	if s.KVCacheDType == KVCacheFP8 {
		if m := fp8KVMissing(b.dev.Info()); m != "" {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("cuda backend: %s: %w", strings.Join(missing, "; "), weights.ErrUnsupported)
}

// fp8WeightsMissing says why a device of info cannot run FP8 weights ("" when it can).
func fp8WeightsMissing(info cuda.Info) string {
	if info.Major*10+info.Minor >= fp8MinComputeCapability {
		return ""
	}
	return fmt.Sprintf("fp8 weights: need compute capability 8.9 or newer (e4m3 conversions in hardware: Ada, Hopper), %s is %d.%d; --device cpu runs them",
		info.Name, info.Major, info.Minor)
}

// fp8KVMissing says why a device of info cannot hold an FP8 KV cache ("" when it can).
func fp8KVMissing(info cuda.Info) string {
	if info.Major*10+info.Minor >= fp8MinComputeCapability {
		return ""
	}
	return fmt.Sprintf("fp8 KV cache: needs compute capability 8.9 or newer (e4m3 conversions in hardware: Ada, Hopper), %s is %d.%d; --device cpu runs it",
		info.Name, info.Major, info.Minor)
}

// loadFP8 looks up the FP8 kernels for the compute dtype.
func (b *cudaBackend) loadFP8() error {
	if b.fp8.quantize != nil {
		return nil
	}
	tn := map[cuda.DataType]string{cuda.BFloat16: "bf16", cuda.Float16: "f16", cuda.Float32: "f32"}[b.dtype]
	q, err := b.mod.Function("QuantizeE4M3_" + tn)
	if err != nil {
		return err
	}
	for i, nt := range []int{1, 2, 4, 8} {
		if b.fp8.matmul[i], err = b.mod.Function(fmt.Sprintf("MatMulE4M3_nt%d", nt)); err != nil {
			return err
		}
	}
	if b.fp8.scale, err = b.mod.Function("ScaleE4M3"); err != nil {
		return err
	}
	for i, sh := range fp8RowShapes {
		if b.fp8.quantizeRows[i], err = b.mod.Function(fmt.Sprintf("QuantizeE4M3_%s_r%dx%d", tn, sh.threads, sh.groups)); err != nil {
			return err
		}
	}
	b.fp8.stageMax = b.dev.Info().SharedPerBlockOptin - fp8StageStatic
	if b.fp8.norm, err = b.loadForms("NormE4M3"); err != nil {
		return err
	}
	if b.fp8.swiglu, err = b.loadForms("SwiGLUE4M3_" + tn); err != nil {
		return err
	}
	if tn != "f32" {
		if b.fp8.swiglu16, err = b.loadForms("SwiGLUE4M3_" + tn + "_in16"); err != nil {
			return err
		}
	}
	if b.fp8.lt, err = b.dev.LoadBLASLt(b.blas); err == nil {
		// Decode steps run their products at their graph bucket's rows, a few row counts for a server's
		// life; a prefill's or mixed step's row counts are as many as its chunks: only the buckets' plans
		// time their candidates.
		b.fp8.lt.TuneRows = func(rows int) bool { return rows == graphBucket(rows) }
		err = b.probeLt()
	}
	if err != nil {
		slog.Warn("cuda backend: no cuBLASLt e4m3 GEMM; FP8 products of every size run the FP8 kernel", "err", err)
		if b.fp8.lt != nil {
			b.fp8.lt.Destroy()
		}
		b.fp8.lt = nil
	}
	if info := b.dev.Info(); info.Major == 9 && info.Minor == 0 {
		if err := b.loadFP8MMA(); err != nil {
			slog.Warn("cuda backend: no e4m3 mma kernel; the FP8 kernel converts its codes to f16", "err", err)
		}
		if err := b.loadFP8Gemm(); err != nil {
			slog.Warn("cuda backend: no e4m3 skinny GEMM; FP8 products of 9-64 rows run on cuBLASLt", "err", err)
		}
	}
	b.fp8.quantize = q
	return nil
}

// loadForms loads the forms of the quantizing kernel name: name, name_r<threads>x<groups> by
// fp8RowShapes, and name_staged with stageMax bytes of dynamic shared memory.
func (b *cudaBackend) loadForms(name string) (f fp8Forms, err error) {
	if f.loop, err = b.mod.Function(name); err != nil {
		return f, err
	}
	for i, sh := range fp8RowShapes {
		if f.rows[i], err = b.mod.Function(fmt.Sprintf("%s_r%dx%d", name, sh.threads, sh.groups)); err != nil {
			return f, err
		}
	}
	if f.staged, err = b.mod.Function(name + "_staged"); err == nil {
		err = f.staged.SetMaxDynamicShared(b.fp8.stageMax)
	}
	return f, err
}

// loadFP8MMA loads the Hopper FP8 product (kernels.FP8SM90PTX), compiled by the driver.
func (b *cudaBackend) loadFP8MMA() error {
	mod, err := b.dev.LoadModule(kernels.FP8SM90PTX)
	if err != nil {
		return err
	}
	var fns [4]*cuda.Function
	for i, nt := range []int{1, 2, 4, 8} {
		if fns[i], err = mod.Function(fmt.Sprintf("MatMulE4M3mma_nt%d", nt)); err != nil {
			return errors.Join(err, mod.Unload())
		}
	}
	b.fp8.mma, b.fp8.mmaMod = fns, mod
	return nil
}

// loadFP8Gemm loads the skinny GEMM's e4m3 entry points (kernels.GemmSM90PTX, compiled by the driver;
// its own module: the 16-bit GEMM's exists only for 16-bit compute dtypes).
func (b *cudaBackend) loadFP8Gemm() error {
	mod, err := b.dev.LoadModule(kernels.GemmSM90PTX)
	if err != nil {
		return err
	}
	share := b.dev.Info().SharedPerBlockOptin
	var fns [4]*cuda.Function
	for i := range fns {
		fns[i], err = mod.Function(fmt.Sprintf("GemmBulk_e4m3_nt%d", i+1))
		if err == nil {
			err = fns[i].SetMaxDynamicShared(share)
		}
		if err != nil {
			return errors.Join(err, mod.Unload())
		}
	}
	b.fp8.gemm, b.fp8.gemmMod, b.fp8.gemmShare = fns, mod, share
	return nil
}

// probeLt runs one small e4m3 product on cuBLASLt, so that a library or GPU without the form the FP8
// products use (TN, float32 output) is found at load, not in a step; then the same product with
// outer-vector scales, which the products use (ltScaled) only where it gives exactly each row's and
// column's scales: every code 1.0, so D[i][j] = k·sa[i]·sb[j], small integers, exact.
func (b *cudaBackend) probeLt() error {
	const m, n, k = 64, 128, 64
	var ptrs [5]cuda.DevicePtr
	defer func() {
		for _, p := range ptrs {
			b.dev.Free(p)
		}
	}()
	sa, sb := make([]float32, m), make([]float32, n)
	for i := range sa {
		sa[i] = float32(i + 1)
	}
	for j := range sb {
		sb[j] = float32(j + 1)
	}
	ones := func(n int) []byte { return bytes.Repeat([]byte{0x38}, n) } // e4m3 1.0
	for i, data := range [][]byte{ones(m * k), ones(n * k), make([]byte, 4*m*n), cuda.Bytes(sa), cuda.Bytes(sb)} {
		p, err := b.dev.Alloc(int64(len(data)))
		if err != nil {
			return err
		}
		ptrs[i] = p
		if err := b.dev.CopyToDevice(p, data); err != nil {
			return err
		}
	}
	lt := b.fp8.lt
	if err := lt.MatmulE4M3(m, n, k, ptrs[0], k, ptrs[1], k, ptrs[2], m, b.stream); err != nil {
		return err
	}
	if err := b.stream.Synchronize(); err != nil {
		return err
	}
	b.fp8.ltScaled = false
	err := lt.MatmulE4M3Scaled(m, n, k, ptrs[0], k, ptrs[1], k, ptrs[2], m, ptrs[3], ptrs[4], b.stream)
	if err == nil {
		err = b.stream.Synchronize()
	}
	if err != nil {
		slog.Debug("cuda backend: cuBLASLt without outer-vector scales; FP8 prefill products scaled by a kernel", "err", err)
		return nil
	}
	d := make([]float32, m*n)
	if err := b.dev.CopyFromDevice(cuda.Bytes(d), ptrs[2]); err != nil {
		return err
	}
	for j := range n {
		for i := range m {
			if d[i+j*m] != float32(k)*sa[i]*sb[j] {
				slog.Warn("cuda backend: cuBLASLt's outer-vector scales are not per row and column as asked; FP8 prefill products scaled by a kernel",
					"i", i, "j", j, "got", d[i+j*m], "want", float32(k)*sa[i]*sb[j])
				return nil
			}
		}
	}
	b.fp8.ltScaled = true
	return nil
}

// UploadFP8 keeps w's codes, padded to rows of a multiple of 16 and columns of a multiple of 64 with
// zero codes, and its row scales.
func (b *cudaBackend) UploadFP8(w *FP8Weight) (Weight, error) {
	if err := w.check(); err != nil {
		return Weight{}, fmt.Errorf("cuda backend: %w", err)
	}
	if err := b.checkFP8(true, Shape{}); err != nil {
		return Weight{}, err
	}
	if err := b.loadFP8(); err != nil {
		return Weight{}, fmt.Errorf("cuda backend: %w", err)
	}
	f := &cudaFP8{inputScale: w.InputScale, rowsPad: (w.Rows + 15) / 16 * 16, colsPad: (w.Cols + 63) / 64 * 64}
	codes := w.Codes
	if f.rowsPad != w.Rows || f.colsPad != w.Cols {
		codes = make([]byte, f.rowsPad*f.colsPad)
		for o := range w.Rows {
			copy(codes[o*f.colsPad:], w.Codes[o*w.Cols:(o+1)*w.Cols])
		}
	}
	scales := make([]float32, f.rowsPad)
	for i := range scales {
		scales[i] = 1
	}
	copy(scales, w.Scales)
	cw := &cudaWeight{fp8: f}
	var err error
	if cw.ptr, err = b.alloc(int64(len(codes))); err != nil {
		return Weight{}, fmt.Errorf("cuda backend: tensor %q: %w", w.Name, err)
	}
	if f.scales, err = b.alloc(int64(4 * len(scales))); err != nil {
		return Weight{}, fmt.Errorf("cuda backend: tensor %q: %w", w.Name, err)
	}
	if err := errors.Join(b.dev.CopyToDevice(cw.ptr, codes), b.dev.CopyToDevice(f.scales, cuda.Bytes(scales))); err != nil {
		return Weight{}, fmt.Errorf("cuda backend: tensor %q: %w", w.Name, err)
	}
	return Weight{Rows: w.Rows, Cols: w.Cols, Data: cw}, nil
}

// ensureFP8Workspace grows the quantized input rows' workspace to rows rows of colsPad codes (and their
// f16 values for up to fp8TileRows of them).
func (b *cudaBackend) ensureFP8Workspace(rows, colsPad int) error {
	codes, scales, x16 := int64(rows)*int64(colsPad), 4*int64(rows), 2*int64(min(rows, fp8TileRows))*int64(colsPad)
	if codes <= b.fp8.codesCap && scales <= b.fp8.scalesCap && x16 <= b.fp8.x16Cap {
		return nil
	}
	if err := b.dropGraphs(); err != nil { // they hold the old workspace's addresses
		return err
	}
	codes, scales, x16 = max(codes, b.fp8.codesCap), max(scales, b.fp8.scalesCap), max(x16, b.fp8.x16Cap)
	if err := b.freeFP8Workspace(); err != nil {
		return err
	}
	var err error
	if b.fp8.codes, err = b.dev.Alloc(codes); err != nil {
		return err
	}
	if b.fp8.scales, err = b.dev.Alloc(scales); err != nil {
		return err
	}
	if b.fp8.x16, err = b.dev.Alloc(x16); err != nil {
		return err
	}
	b.fp8.codesCap, b.fp8.scalesCap, b.fp8.x16Cap = codes, scales, x16
	return nil
}

// freeFP8Workspace frees the quantized input rows' workspace.
func (b *cudaBackend) freeFP8Workspace() error {
	err := errors.Join(b.dev.Free(b.fp8.codes), b.dev.Free(b.fp8.scales), b.dev.Free(b.fp8.x16))
	b.fp8.codes, b.fp8.scales, b.fp8.x16, b.fp8.codesCap, b.fp8.scalesCap, b.fp8.x16Cap = 0, 0, 0, 0, 0, 0
	return err
}

// freeFP8 frees the FP8 workspace and cuBLASLt (Close).
func (b *cudaBackend) freeFP8() error {
	err := b.freeFP8Workspace()
	if b.fp8.mmaMod != nil {
		err = errors.Join(err, b.fp8.mmaMod.Unload())
		b.fp8.mma, b.fp8.mmaMod = [4]*cuda.Function{}, nil
	}
	if b.fp8.gemmMod != nil {
		err = errors.Join(err, b.fp8.gemmMod.Unload())
		b.fp8.gemm, b.fp8.gemmMod = [4]*cuda.Function{}, nil
	}
	if b.fp8.lt != nil {
		err = errors.Join(err, b.fp8.lt.Destroy())
		b.fp8.lt = nil
	}
	return err
}

// recordFP8 records MatMul with an FP8 weight: op is the product as MatMul built it.
func (b *cudaBackend) recordFP8(op stepOp, a opArgs) {
	f := a.w.fp8
	if err := b.ensureFP8Workspace(a.x.rows, f.colsPad); err != nil {
		b.fail(fmt.Errorf("cuda backend: fp8 workspace: %w", err))
		return
	}
	op.fp8 = true
	var bias uint64
	if a.bias != nil {
		bias = uint64(a.bias.ptr)
	}
	b.record(op, a, uint64(a.w.ptr), uint64(f.scales), bias, uint64(b.fp8.codes), uint64(b.fp8.scales), uint64(b.fp8.x16))
}

// fp8Split is the number of warps that share each 16-row tile's k-blocks (1, 2, 4 or 8) in a product of
// tiles tiles, chunks chunks of token rows and kBlocks 64-column k-blocks: enough warps to fill the
// device several times over (64 warps an SM in all), each keeping at least eight k-blocks (two full
// unrolled steps). Short warp loops win over long ones here: a warp waits for each step's loads before
// its mma, and more warps keep more loads in flight (BenchmarkCUDAFP8MatMul, docs/bench/fp8-h200.md).
func fp8Split(tiles, chunks, kBlocks, sms int) int {
	ks := 1
	for ks < 8 && tiles*chunks*ks < 64*sms && kBlocks >= 8*ks {
		ks *= 2
	}
	return ks
}

// runFP8 queues an FP8 product (and its bias) at p.rows rows.
func (b *cudaBackend) runFP8(op *stepOp, a *opArgs, p *opPlan) error {
	f, rows := a.w.fp8, p.rows
	x16 := readsX16(p.mm.path, rows, b.fp8.mma[0] != nil)
	// Quantized here unless the op before it wrote the quantized rows (runFusedE4M3).
	if !p.fp8Quantized {
		q := fp8QuantizeParams{Codes: b.fp8.codes, Scales: b.fp8.scales, X: a.x.ptr, InputScale: f.inputScale,
			MinScale: fp8MinScale, K: int32(op.in), KP: int32(f.colsPad)}
		if x16 {
			q.X16 = b.fp8.x16
		}
		fn, threads := b.fp8.quantize, rowThreads(f.colsPad)
		if i, ok := fp8RowShape(op.in); ok {
			fn, threads = b.fp8.quantizeRows[i], fp8RowShapes[i].threads
		}
		if err := launchDependent(b, fn, cuda.Dim3{X: rows}, cuda.Dim3{X: threads}, 0, &q); err != nil {
			return err
		}
	}
	if p.mm.path == pathFP8Lt {
		// Row-major Y[rows][out] = Xq[rows][kp] · W[out][kp]ᵀ is column-major Yᵀ = W · Xqᵀ: W's row scales
		// scale Yᵀ's rows, the input rows' scales its columns.
		if b.fp8.ltScaled {
			if err := b.fp8.lt.MatmulE4M3Scaled(op.out, rows, f.colsPad, a.w.ptr, f.colsPad, b.fp8.codes, f.colsPad, a.d.ptr,
				op.out, f.scales, b.fp8.scales, b.stream); err != nil || a.bias == nil {
				return err
			}
			n := int64(rows) * int64(op.out)
			params := struct {
				Y, Bias cuda.DevicePtr
				N       int64
				Cols    int32
			}{a.d.ptr, a.bias.ptr, n, int32(op.out)}
			return cuda.Launch(b.fn.bias, cuda.Dim3{X: int(min((n+255)/256, 65535))}, cuda.Dim3{X: 256}, 0, b.stream, &params)
		}
		matmul := b.fp8.lt.MatmulE4M3
		if p.fp8Out16 {
			matmul = b.fp8.lt.MatmulE4M3BF16
		}
		if err := matmul(op.out, rows, f.colsPad, a.w.ptr, f.colsPad, b.fp8.codes, f.colsPad, a.d.ptr, op.out, b.stream); err != nil {
			return err
		}
		if p.fp8Unscaled {
			if a.bias != nil { // the plan never leaves a biased product unscaled: ScaleE4M3 adds the bias
				return fmt.Errorf("cuda backend: FP8 product with a bias planned unscaled")
			}
			b.stats.UnscaledFP8++
			if p.fp8Out16 {
				b.stats.Out16FP8++
			}
			return nil // the op after it applies the scales (opPlan.fp8Unscaled)
		}
		s := fp8ScaleParams{Y: a.d.ptr, SX: b.fp8.scales, SW: f.scales, M: int32(rows), N: int32(op.out)}
		if a.bias != nil {
			s.Bias = a.bias.ptr
		}
		// cuBLASLt's kernel is not launched as a dependent: this one waits for it the ordinary way.
		return b.launchScaleE4M3(s)
	}
	if p.mm.path == pathFP8Gemm {
		return b.launchFP8Gemm(op, a, rows)
	}
	nt := 3 // token tiles of fp8TileRows: 1, 2, 4 or 8 per block
	switch {
	case rows <= fp8TileRows:
		nt = 0
	case rows <= 2*fp8TileRows:
		nt = 1
	case rows <= 4*fp8TileRows:
		nt = 2
	}
	chunks := (rows + fp8TileRows<<nt - 1) / (fp8TileRows << nt)
	tiles := f.rowsPad / 16
	ks := fp8Split(tiles, chunks, f.colsPad/64, b.dev.Info().NumSMs)
	rb := 8 / ks
	params := fp8Params{Y: a.d.ptr, XQ: b.fp8.codes, W: a.w.ptr, SX: b.fp8.scales, SW: f.scales,
		M: int32(rows), N: int32(op.out), KP: int32(f.colsPad), KS: int32(ks), Tiles: int32(tiles)}
	if x16 {
		params.XQ = b.fp8.x16
	}
	if a.bias != nil {
		params.Bias = a.bias.ptr
	}
	fn := b.fp8.matmul[nt]
	if b.fp8.mma[nt] != nil {
		fn = b.fp8.mma[nt]
	}
	return launchDependent(b, fn, cuda.Dim3{X: chunks, Y: (tiles + rb - 1) / rb}, cuda.Dim3{X: 256}, 0, &params)
}

// fp8StageStatic is room for the staged kernels' static shared memory (their reductions' scratch), which
// their dynamic share (a row as float32) must leave free of the block's limit.
const fp8StageStatic = 1024

// runFusedE4M3 queues a norm or SwiGLU op that writes its output quantized for the FP8 product p.fp8Out
// (NormE4M3, SwiGLUE4M3): the product's codes and scales workspace, with its static input scale.
func (b *cudaBackend) runFusedE4M3(op *stepOp, a *opArgs, p *opPlan) error {
	cols, staged := op.in, b.tune.FP8Staged
	if op.kind == opSwiGLU {
		cols = op.out
		if p.fp8In16 {
			staged = fp8StagedIn16(p.rows, staged)
		}
	}
	return b.launchFusedE4M3(op, a, p, fp8FusedForm(cols, b.fp8.stageMax, staged))
}

// launchFusedE4M3 is runFusedE4M3 in the given form (fp8FusedForm).
func (b *cudaBackend) launchFusedE4M3(op *stepOp, a *opArgs, p *opPlan, form int) error {
	f := b.args[p.fp8Out].w.fp8
	params := fp8FusedParams{Codes: b.fp8.codes, Scales: b.fp8.scales, InputScale: f.inputScale, MinScale: fp8MinScale,
		KP: int32(f.colsPad)}
	if p.fp8X16 {
		params.X16 = b.fp8.x16
	}
	params.InSX, params.InSW = b.fp8InScales(p)
	forms := &b.fp8.norm
	switch op.kind {
	case opNorm:
		params.Residual, params.Weight, params.Eps, params.Cols = a.r.ptr, a.w.ptr, a.eps, int32(op.in)
		if a.a != nil {
			params.Add = a.a.ptr
		}
	case opSwiGLU: // gate/up [rows][2·inter]
		forms, params.Residual, params.Cols = &b.fp8.swiglu, a.x.ptr, int32(op.out)
		if p.fp8In16 {
			if b.fp8.swiglu16.loop == nil {
				return fmt.Errorf("cuda backend: the quantizing SwiGLU's bfloat16-input kernels are not loaded")
			}
			forms = &b.fp8.swiglu16
		}
	default:
		return fmt.Errorf("cuda backend: %v cannot quantize its output for an FP8 product", op.kind)
	}
	fn, threads, share := forms.loop, rowThreads(int(params.Cols)), 0
	switch cols := int(params.Cols); {
	case form == fp8FormStaged:
		if !fp8StagedFits(cols, b.fp8.stageMax) {
			return fmt.Errorf("cuda backend: the staged %v kernel cannot hold rows of %d values", op.kind, cols)
		}
		fn, threads, share = forms.staged, fp8StageThreads, 4*cols
	case form >= 0:
		if shape, ok := fp8RowShape(cols); !ok || form < shape || form >= len(fp8RowShapes) {
			return fmt.Errorf("cuda backend: register shape %d of the %v kernel cannot hold rows of %d values", form, op.kind, cols)
		}
		fn, threads = forms.rows[form], fp8RowShapes[form].threads
	}
	return launchDependent(b, fn, cuda.Dim3{X: p.rows}, cuda.Dim3{X: threads}, share, &params)
}

// fp8InScales are the scales an op applies to the unscaled sums of the FP8 product before it
// (opPlan.fp8ScaleFrom; 0, 0 for none): the product's input scales, still in the workspace (the
// quantizing ops overwrite them row by row after reading them), and its weight's.
func (b *cudaBackend) fp8InScales(p *opPlan) (sx, sw cuda.DevicePtr) {
	if p.fp8ScaleFrom < 0 {
		return 0, 0
	}
	return b.fp8.scales, b.args[p.fp8ScaleFrom].w.fp8.scales
}

// launchFP8Gemm queues the FP8 product of rows (at most gemvMaxTokens) token rows, their codes and scales
// in the workspace, on the skinny GEMM's e4m3 entry point (kernels/gemm_sm90.cu): y = (xq · wᵀ)·sx·sw +
// bias, shaped by planFP8Gemm over chunks of 128 codes.
func (b *cudaBackend) launchFP8Gemm(op *stepOp, a *opArgs, rows int) error {
	f := a.w.fp8
	nt := (rows + 15) / 16
	if nt < 1 || nt > len(b.fp8.gemm) || b.fp8.gemm[nt-1] == nil {
		return fmt.Errorf("cuda backend: FP8 skinny GEMM of %d rows: not loaded or too many rows", rows)
	}
	facts := b.facts()
	plan, most := facts.fp8GemmPlan(op.out, f.colsPad)
	stages := gemmStages(plan.wg, nt, most, b.fp8.gemmShare)
	if stages == 0 {
		return fmt.Errorf("cuda backend: FP8 skinny GEMM: %d warpgroups × %d token tiles do not fit %d bytes of shared memory",
			plan.wg, nt, b.fp8.gemmShare)
	}
	kp := int64(f.colsPad)
	wmap, err := b.dev.EncodeTiled(cuda.E4M3, a.w.ptr, []int64{kp, int64(f.rowsPad)}, []int64{kp}, []int{fp8GemmChunk, 64 * plan.wg})
	if err != nil {
		return err
	}
	xmap, err := b.dev.EncodeTiled(cuda.E4M3, b.fp8.codes, []int64{kp, int64(rows)}, []int64{kp}, []int{fp8GemmChunk, 16 * nt})
	if err != nil {
		return err
	}
	p := gemmParams{WMap: wmap, XMap: xmap, Y: a.d.ptr, M: int32(rows), N: int32(op.out), K: int32(f.colsPad),
		Stages: int32(stages), Flags: int32(b.tune.GemmFlags), SX: b.fp8.scales, SW: f.scales}
	if a.bias != nil {
		p.Bias = a.bias.ptr
	}
	grid := cuda.Dim3{X: gemmBlocks(op.out, plan), Y: plan.ks}
	return cuda.LaunchCluster(b.fp8.gemm[nt-1], grid, cuda.Dim3{X: 128*plan.wg + 32}, cuda.Dim3{X: 1, Y: plan.ks},
		1024+stages*(gemmSlot(plan.wg, nt)+16), b.stream, b.usePDL(), &p)
}
