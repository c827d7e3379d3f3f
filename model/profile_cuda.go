//go:build cuda

package model

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gollm/gollm/internal/cuda"
)

// stepProfile collects the device time of every op of the steps a backend runs while its prof is set:
// each step runs op by op (padded to its graph bucket when it would run as a graph, so the kernels are
// the graph's), behind a spin kernel that keeps the device busy while the host queues the ops, with an
// event after each op. The times are then those of back-to-back kernels on the device, launch gaps
// included, as in a graph replay.
type stepProfile struct {
	SpinNS uint64       // how long the spin kernel holds the device (ns); 0: 20 ms
	Ops    []profiledOp // every op of every profiled step, in order
}

// profiledOp is one op's device time in a profiled step.
type profiledOp struct {
	Name string
	N, K int // a matrix product's weight rows and columns
	MS   float64
	// FP8: the product's weight is FP8, one byte an element whatever the compute dtype.
	FP8 bool
}

// Label names the op for a report: its name and, for a matrix product, the weight's shape.
func (o profiledOp) Label() string {
	if o.N > 0 {
		return fmt.Sprintf("%s %dx%d", o.Name, o.N, o.K)
	}
	return o.Name
}

// profileQueue runs the recorded ops as described on stepProfile. It runs on the owner goroutine.
func (b *cudaBackend) profileQueue() error {
	rows := b.graphRows() // an op that cannot run padded (graphable) would overrun its buffers
	b.st.graphRun = rows > 0
	events := make([]*cuda.Event, len(b.ops)+1)
	defer func() {
		for _, e := range events {
			if e != nil {
				_ = e.Destroy()
			}
		}
	}()
	for i := range events {
		var err error
		if events[i], err = b.dev.NewEvent(); err != nil {
			return err
		}
	}
	spin := struct{ NS uint64 }{b.prof.SpinNS}
	if spin.NS == 0 {
		spin.NS = 20_000_000
	}
	if err := cuda.Launch(b.gemv.spin, cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, b.stream, &spin); err != nil {
		return err
	}
	if err := events[0].Record(b.stream); err != nil {
		return err
	}
	plans := b.plan(rows)
	for i, op := range b.ops {
		if err := b.runOp(i, &plans[i]); err != nil {
			return fmt.Errorf("op %d (%s): %w", i, op.kind, err)
		}
		if err := events[i+1].Record(b.stream); err != nil {
			return err
		}
	}
	if err := events[len(b.ops)].Synchronize(); err != nil {
		return err
	}
	for i, op := range b.ops {
		ms, err := events[i].Elapsed(events[i+1])
		if err != nil {
			return err
		}
		o := profiledOp{Name: op.kind.String(), MS: ms}
		if op.kind == opMatMul {
			o.N, o.K, o.FP8 = op.out, op.in, op.fp8
			if op.fp8 {
				o.Name = "matmul-fp8"
			}
		}
		b.prof.Ops = append(b.prof.Ops, o)
	}
	return nil
}

// profileRow is one line of a profile report: every op with one label.
type profileRow struct {
	Label      string
	Count      int
	MS         float64 // total over the step(s)
	Bytes      int64   // a matrix product's weight bytes, times Count
	FirstIndex int
}

// summarize groups ops by label (in order of first appearance), over steps profiled steps, with the
// weight bytes of the matrix products at elem bytes an element (one for FP8 weights).
func summarize(ops []profiledOp, steps, elem int) []profileRow {
	byLabel := map[string]*profileRow{}
	var rows []*profileRow
	for i, o := range ops {
		l := o.Label()
		r := byLabel[l]
		if r == nil {
			r = &profileRow{Label: l, FirstIndex: i}
			byLabel[l] = r
			rows = append(rows, r)
		}
		r.Count++
		r.MS += o.MS
		e := elem
		if o.FP8 {
			e = 1
		}
		r.Bytes += int64(o.N) * int64(o.K) * int64(e)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].FirstIndex < rows[j].FirstIndex })
	out := make([]profileRow, len(rows))
	for i, r := range rows {
		out[i] = *r
		out[i].Count /= max(1, steps)
		out[i].MS /= float64(max(1, steps))
		out[i].Bytes /= int64(max(1, steps))
	}
	return out
}

// formatProfile renders a per-step profile table; bandwidth in bytes/s is the yardstick of %BW.
func formatProfile(title string, rows []profileRow, bandwidth float64) string {
	var sb strings.Builder
	var total float64
	for _, r := range rows {
		total += r.MS
	}
	fmt.Fprintf(&sb, "%s: %.3f ms per step (sum of ops)\n", title, total)
	fmt.Fprintf(&sb, "| op | per step | µs each | µs per step | share | weight GB/s | %%BW |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		each := r.MS * 1e3 / float64(max(1, r.Count))
		gbs, bw := "", ""
		if r.Bytes > 0 && r.MS > 0 {
			rate := float64(r.Bytes) / (r.MS * 1e-3)
			gbs, bw = fmt.Sprintf("%.0f", rate/1e9), fmt.Sprintf("%.0f%%", 100*rate/bandwidth)
		}
		fmt.Fprintf(&sb, "| %s | %d | %.1f | %.1f | %.1f%% | %s | %s |\n", r.Label, r.Count, each, r.MS*1e3,
			100*r.MS/total, gbs, bw)
	}
	return sb.String()
}
