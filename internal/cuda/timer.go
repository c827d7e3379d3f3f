//go:build cuda

package cuda

import (
	"math"
	"slices"
	"time"
)

// Timer times launches on the default stream with CUDA events, the way gollm's kernel benchmarks
// (gollm bench attention, package attention's variants) do: Warmup untimed runs, then Iters runs each
// bracketed by its own pair of events, with a GPU spin of SpinNS nanoseconds (or, with Flush, zeros
// written over a 256 MiB buffer, which is how triton.testing.do_bench empties L2: cache.zero_() of a
// 256 MiB tensor before each run) queued before each run outside the events, so that the host's launches
// stay ahead of the GPU and a run never waits for the host.
type Timer struct {
	dev        *Device
	start, end []*Event
	mod        *Module // timerPTX's
	spin, zero *Function
	flushBuf   DevicePtr

	Iters, Warmup int
	SpinNS        uint64
	// Flush queues zeros over a 256 MiB buffer before each run instead of the spin: do_bench's flush,
	// written as torch's zero_ (which do_bench calls) writes them, by a kernel of 16-byte stores, because
	// a driver memset leaves L2 in another state for the next kernel than do_bench's flush does, and the
	// peers' figures this flush serves to compare with were taken after do_bench's.
	Flush bool
	// HostUS is the host's µs per run of the round Median kept.
	HostUS float64
}

// timerFlushBytes is the buffer Flush zeroes (triton.testing.do_bench's cache_size on NVIDIA GPUs).
const timerFlushBytes = 256 << 20

// timerPTX holds gollm_timer_spin, a one-thread kernel that waits p nanoseconds of the GPU's global
// timer, and gollm_timer_zero, which writes zeros over n16 16-byte pieces at ptr (p = {ptr, n16}) with
// one 16-byte store a piece, grid-stride.
const timerPTX = `
.version 7.0
.target sm_80
.address_size 64
.visible .entry gollm_timer_spin(.param .align 8 .b8 p[8])
{
	.reg .b64 %rd<5>;
	.reg .pred %pp;
	ld.param.u64 %rd1, [p];
	mov.u64 %rd2, %globaltimer;
LOOP:
	mov.u64 %rd3, %globaltimer;
	sub.u64 %rd4, %rd3, %rd2;
	setp.lt.u64 %pp, %rd4, %rd1;
	@%pp bra LOOP;
	ret;
}

.visible .entry gollm_timer_zero(.param .align 8 .b8 p[16])
{
	.reg .b64 %rd<8>;
	.reg .b32 %r<8>;
	.reg .pred %pp;
	ld.param.u64 %rd1, [p];
	ld.param.u64 %rd2, [p+8];
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mov.u32 %r4, %nctaid.x;
	mul.wide.u32 %rd3, %r1, %r2;
	cvt.u64.u32 %rd4, %r3;
	add.u64 %rd3, %rd3, %rd4;
	mul.wide.u32 %rd5, %r4, %r2;
	mov.u32 %r5, 0;
	setp.ge.u64 %pp, %rd3, %rd2;
	@%pp bra DONE;
ZLOOP:
	shl.b64 %rd6, %rd3, 4;
	add.u64 %rd7, %rd1, %rd6;
	st.global.v4.u32 [%rd7], {%r5, %r5, %r5, %r5};
	add.u64 %rd3, %rd3, %rd5;
	setp.lt.u64 %pp, %rd3, %rd2;
	@%pp bra ZLOOP;
DONE:
	ret;
}
`

// NewTimer makes a Timer of iters timed runs after warmup untimed ones, spinning spinNS nanoseconds
// before each; Close frees it.
func (d *Device) NewTimer(iters, warmup int, spinNS uint64) (*Timer, error) {
	t := &Timer{dev: d, Iters: max(1, iters), Warmup: warmup, SpinNS: spinNS}
	for range t.Iters {
		s, err := d.NewEvent()
		if err != nil {
			t.Close()
			return nil, err
		}
		e, err := d.NewEvent()
		if err != nil {
			_ = s.Destroy()
			t.Close()
			return nil, err
		}
		t.start, t.end = append(t.start, s), append(t.end, e)
	}
	var err error
	t.mod, err = d.LoadModule([]byte(timerPTX))
	if err == nil {
		t.spin, err = t.mod.Function("gollm_timer_spin")
	}
	if err == nil {
		t.zero, err = t.mod.Function("gollm_timer_zero")
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Close frees the Timer's events, buffers and kernels.
func (t *Timer) Close() {
	if t.mod != nil {
		_ = t.mod.Unload()
		t.mod = nil
	}
	for i := range t.start {
		_ = t.start[i].Destroy()
		_ = t.end[i].Destroy()
	}
	t.start, t.end = nil, nil
	if t.flushBuf != 0 {
		_ = t.dev.Free(t.flushBuf)
		t.flushBuf = 0
	}
}

// Median returns the lower of two rounds' median device time, in µs, of launch(copy), each run on the
// next of copies copies of its inputs (so that a working set larger than L2 rotates through it). Two
// rounds, because a whole round now and then runs slow, which one median does not reject.
func (t *Timer) Median(copies int, launch func(copy int) error) (float64, error) {
	best, host := math.Inf(1), 0.0
	for range 2 {
		us, err := t.round(copies, launch)
		if err != nil {
			return 0, err
		}
		if us < best {
			best, host = us, t.HostUS
		}
	}
	t.HostUS = host
	return best, nil
}

func (t *Timer) round(copies int, launch func(copy int) error) (float64, error) {
	us := make([]float64, 0, t.Iters)
	err := t.dev.Do(func() error {
		run := 0
		for range t.Warmup {
			if err := launch(run % copies); err != nil {
				return err
			}
			run++
		}
		spin := struct{ NS uint64 }{t.SpinNS}
		t0 := time.Now()
		for i := range t.Iters {
			if t.Flush {
				if t.flushBuf == 0 { // allocated at the first flushed round
					var err error
					if t.flushBuf, err = t.dev.Alloc(timerFlushBytes); err != nil {
						return err
					}
				}
				p := struct{ Ptr, N16 uint64 }{uint64(t.flushBuf), timerFlushBytes / 16}
				if err := Launch(t.zero, Dim3{X: 8 * t.dev.Info().NumSMs}, Dim3{X: 256}, 0, nil, &p); err != nil {
					return err
				}
			} else if spin.NS > 0 {
				if err := Launch(t.spin, Dim3{X: 1}, Dim3{X: 1}, 0, nil, &spin); err != nil {
					return err
				}
			}
			if err := t.start[i].Record(nil); err != nil {
				return err
			}
			if err := launch(run % copies); err != nil {
				return err
			}
			run++
			if err := t.end[i].Record(nil); err != nil {
				return err
			}
		}
		t.HostUS = float64(time.Since(t0).Microseconds()) / float64(t.Iters)
		if err := t.end[t.Iters-1].Synchronize(); err != nil {
			return err
		}
		for i := range t.Iters {
			ms, err := t.start[i].Elapsed(t.end[i])
			if err != nil {
				return err
			}
			us = append(us, ms*1e3)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	slices.Sort(us)
	return us[len(us)/2], nil
}

// CopyBandwidth times device-to-device copies of n bytes (the median of 20 after 3 warm-up runs, a 50 µs
// spin before each) and returns (bytes read + bytes written) per second: the yardstick of gollm's
// rooflines and %BW columns. It allocates 2n bytes for the call.
func (d *Device) CopyBandwidth(n int64) (float64, error) {
	t, err := d.NewTimer(20, 3, 50_000)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	src, err := d.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer d.Free(src)
	dst, err := d.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer d.Free(dst)
	us, err := t.Median(1, func(int) error { return d.CopyDevice(dst, src, n, nil) })
	if err != nil {
		return 0, err
	}
	return 2 * float64(n) / (us * 1e-6), nil
}
