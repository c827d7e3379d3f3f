//go:build cuda

package model

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/weights"
)

// BenchmarkCUDAStepBoundary splits what a pipelined decode step adds to its graph: the batch-1 step of
// each of benchModels (context GOLLM_BENCH_CONTEXT, default 1088), its fed graph (InputFrom) launched 200
// times back to back with, between graphs, each combination of the metadata upload (H: copy engine from
// the slot's page-locked buffer; K: a kernel reading the same buffer through its mapped address), the
// ids' download (D: copy engine; k: a kernel writing the mapped landing place) and the slot's event (E);
// "|" switches between the kernels' stream and a copy stream (P: the slot's picked event, which the
// download's stream waits for; W: the kernels' stream waits for the upload; "up:" the upload on its own
// stream, as PickAsync has it). Start/Wait is the model's own pipelined loop (model.Start of step N+1,
// then step N's Wait), on the same step or advancing one position a step. The metric is device time per
// step (CUDA events around the steps): the step's GPU cost of each way of crossing the host boundary.
//
//	go test -tags cuda -run XXX -bench CUDAStepBoundary ./model
func BenchmarkCUDAStepBoundary(b *testing.B) {
	dev := gpuDevice(b)
	const blockSize = 16
	context := benchContext(b, 1088)
	for _, mc := range benchModels {
		b.Run(mc.name, func(b *testing.B) {
			cfg := mc.cfg()
			const advance = 200 // steps of the advancing loop below
			m, err := LoadRandom(cfg, 1, Options{NumBlocks: (context+advance)/blockSize + 1, BlockSize: blockSize, MaxStepTokens: 64},
				newCUDABackendFunc(cudaConfig{dtype: weights.DTypeBF16, dev: dev}))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			table := make([]int32, (context+advance+blockSize-1)/blockSize)
			for i := range table {
				table[i] = int32(i)
			}
			pos := int32(context - 1)
			s := &Step{Tokens: []int32{7}, Positions: []int32{pos}, SlotMapping: []int32{table[pos/blockSize]*blockSize + pos%blockSize},
				QueryStart: []int32{0, 1}, ContextLens: []int32{int32(context)}, BlockTables: [][]int32{table[:(context+blockSize-1)/blockSize]},
				LogitRows: []int32{0}}
			fed := *s
			fed.InputFrom = []int32{0}
			if err := pipeline(m, 4, func(i int) *Step { // eager, captured, replayed: both slots' graphs
				if i == 0 {
					return s
				}
				return &fed
			}, nil); err != nil {
				b.Fatal(err)
			}
			bk := m.backend.(*cudaBackend)
			g := bk.lastGraph
			slot := &bk.slots[0]
			staged := slot.meta[:4*len(bk.host)]
			ids := slot.ids[:4]
			zero, err := dev.Alloc(4)
			if err != nil {
				b.Fatal(err)
			}
			defer dev.Free(zero)
			if err := dev.Fill32(zero, 0, 1, bk.stream); err != nil {
				b.Fatal(err)
			}
			mapped := func(p []byte) cuda.DevicePtr { return cuda.DevicePtr(uintptr(unsafe.Pointer(unsafe.SliceData(p)))) }
			// GatherRows of one row of bf16 pairs: a one-block kernel copying words.
			copyKernel := func(dst, src cuda.DevicePtr, bytes int) error {
				p := struct {
					Dst, Src, Rows cuda.DevicePtr
					Cols           int32
				}{dst, src, zero, int32(bytes / 2)}
				return cuda.Launch(bk.fn.gather, cuda.Dim3{X: 1}, cuda.Dim3{X: min(1024, (bytes/2+31)/32*32)}, 0, bk.stream, &p)
			}
			ev := slot.done
			spare, err := dev.Alloc(int64(len(staged)))
			if err != nil {
				b.Fatal(err)
			}
			defer dev.Free(spare)
			uploaded, err := dev.NewSyncEvent()
			if err != nil {
				b.Fatal(err)
			}
			defer uploaded.Destroy()
			steps := []struct {
				name string
				run  func() error
			}{
				{"G", func() error { return g.Launch(bk.stream) }},
				{"G+E", func() error { return errors.Join(g.Launch(bk.stream), ev.Record(bk.stream)) }},
				{"H+G", func() error {
					return errors.Join(dev.CopyToDeviceAsync(bk.meta, staged, bk.stream), g.Launch(bk.stream))
				}},
				{"G+D", func() error {
					return errors.Join(g.Launch(bk.stream), dev.CopyFromDeviceAsync(ids, bk.ids, bk.stream))
				}},
				{"H+G+D+E", func() error {
					return errors.Join(dev.CopyToDeviceAsync(bk.meta, staged, bk.stream), g.Launch(bk.stream),
						dev.CopyFromDeviceAsync(ids, bk.ids, bk.stream), ev.Record(bk.stream))
				}},
				{"H+G+P|D+E", func() error { // the download on its own stream
					return errors.Join(dev.CopyToDeviceAsync(bk.meta, staged, bk.stream), g.Launch(bk.stream),
						slot.picked.Record(bk.stream), bk.down.Wait(slot.picked),
						dev.CopyFromDeviceAsync(ids, bk.ids, bk.down), ev.Record(bk.down))
				}},
				{"|H+W+G+P|D+E", func() error { // the upload on the download's stream too, into a spare buffer
					return errors.Join(dev.CopyToDeviceAsync(spare, staged, bk.down), uploaded.Record(bk.down),
						bk.stream.Wait(uploaded), g.Launch(bk.stream),
						slot.picked.Record(bk.stream), bk.down.Wait(slot.picked),
						dev.CopyFromDeviceAsync(ids, bk.ids, bk.down), ev.Record(bk.down))
				}},
				{"up:H+W+G+P|D+E", func() error { // PickAsync's: the upload on a stream of its own
					return errors.Join(dev.CopyToDeviceAsync(spare, staged, bk.up), uploaded.Record(bk.up),
						bk.stream.Wait(uploaded), g.Launch(bk.stream),
						slot.picked.Record(bk.stream), bk.down.Wait(slot.picked),
						dev.CopyFromDeviceAsync(ids, bk.ids, bk.down), ev.Record(bk.down))
				}},
				{"K+G", func() error {
					return errors.Join(copyKernel(bk.meta, mapped(staged), len(staged)), g.Launch(bk.stream))
				}},
				{"G+k", func() error {
					return errors.Join(g.Launch(bk.stream), copyKernel(mapped(ids), bk.ids, len(ids)))
				}},
				{"K+G+k+E", func() error {
					return errors.Join(copyKernel(bk.meta, mapped(staged), len(staged)), g.Launch(bk.stream),
						copyKernel(mapped(ids), bk.ids, len(ids)), ev.Record(bk.stream))
				}},
			}
			start, err := dev.NewEvent()
			if err != nil {
				b.Fatal(err)
			}
			defer start.Destroy()
			end, err := dev.NewEvent()
			if err != nil {
				b.Fatal(err)
			}
			defer end.Destroy()
			// The model's own pipelined loop (Start of step N+1 before step N's Wait, as the engine runs it),
			// timed on the device like the rest: the same step again and again, or advancing one position a
			// step from the context on, as a sequence does (its context and block table grow).
			ahead := make([]Step, advance+1)
			for i := range ahead {
				p := pos + int32(i)
				ahead[i] = fed
				ahead[i].Positions = []int32{p}
				ahead[i].SlotMapping = []int32{table[p/blockSize]*blockSize + p%blockSize}
				ahead[i].ContextLens = []int32{p + 1}
				ahead[i].BlockTables = [][]int32{table[:(p+blockSize)/blockSize]}
			}
			for _, loop := range []struct {
				name string
				step func(i int) *Step
			}{{"Start/Wait", func(int) *Step { return &fed }}, {"Start/Wait/advancing", func(i int) *Step { return &ahead[i] }}} {
				b.Run(loop.name, func(b *testing.B) {
					const n = advance
					before := bk.Stats()
					us := deviceTimePerStep(b, bk, start, end, n, func(run func(i int) error) error {
						return pipeline(m, n, loop.step, run)
					})
					b.ReportMetric(us, "gpu-us/step")
					after := bk.Stats()
					b.ReportMetric(float64(after.Replayed-before.Replayed)/float64(b.N*(n+1)), "replayed-frac")
				})
			}
			for _, st := range steps {
				b.Run(st.name, func(b *testing.B) {
					const n = 200
					b.ReportMetric(deviceTimePerStep(b, bk, start, end, n, func(run func(i int) error) error {
						for i := range n + 1 {
							if err := run(i); err != nil {
								return err
							}
							if i < n {
								if err := st.run(); err != nil {
									return err
								}
							}
						}
						return nil
					}), "gpu-us/step")
				})
			}
		})
	}
}

// deviceTimePerStep returns the device time in µs of one of n steps, the mean over b's loop: loop queues
// the steps and calls mark(0) before the first and mark(n) after the last, which record start and end
// on the kernels' stream.
func deviceTimePerStep(b *testing.B, bk *cudaBackend, start, end *cuda.Event, n int, loop func(mark func(i int) error) error) float64 {
	b.Helper()
	var total float64
	for b.Loop() {
		mark := func(i int) error {
			switch i {
			case 0:
				return start.Record(bk.stream)
			case n:
				return end.Record(bk.stream)
			}
			return nil
		}
		if err := loop(mark); err != nil {
			b.Fatal(err)
		}
		if err := end.Synchronize(); err != nil {
			b.Fatal(err)
		}
		ms, err := start.Elapsed(end)
		if err != nil {
			b.Fatal(err)
		}
		total += ms / float64(n)
	}
	return 1e3 * total / float64(b.N)
}

// pipeline runs steps 0 … n the way the engine pipelines decode: step i+1 is started before step i's
// picks are waited for. started, when set, runs after each step's Start with its index.
func pipeline(m *Model, n int, step func(i int) *Step, started func(i int) error) error {
	var pick *Pick
	for i := range n + 1 {
		next, err := m.Start(step(i), nil)
		if err != nil {
			return err
		}
		if started != nil {
			if err := started(i); err != nil {
				return err
			}
		}
		if pick != nil {
			if _, err := pick.Wait(); err != nil {
				return err
			}
		}
		pick = next
	}
	_, err := pick.Wait()
	return err
}
