package bench

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
)

// humanBytes formats a byte count with a decimal unit (GB = 1e9 bytes, as bandwidths are quoted).
func humanBytes(b float64) string {
	for _, u := range []struct {
		div  float64
		name string
	}{{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}} {
		if b >= u.div {
			return fmt.Sprintf("%.3g %s", b/u.div, u.name)
		}
	}
	return fmt.Sprintf("%.0f B", b)
}

// humanCount formats a parameter count (134.5M, 8.03B).
func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3gB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.4gM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

func weightsKind(random bool) string {
	if random {
		return "random"
	}
	return "checkpoint"
}

// WriteLatencyText prints the results of RunLatency or RunLatencySweep as a table, one row per batch
// size, after a header naming the model, the device and the roofline's bandwidth.
func WriteLatencyText(w io.Writer, results []*LatencyResult) error {
	if len(results) == 0 {
		return nil
	}
	r0 := results[0]
	fmt.Fprintf(w, "model %s (%s %s weights, %s params; backend stores %d-byte weights%s, %d-byte KV) on %s\n",
		r0.Model, weightsKind(r0.RandomWeights), strings.ToLower(r0.DType), humanCount(r0.Params),
		r0.Precision.WeightBytes, layerBytesText(r0.Precision), r0.Precision.KVBytes, r0.Device)
	fmt.Fprintf(w, "input %d, output %d tokens per sequence; prefill in chunks of %d tokens (max batched tokens); %d measured iteration(s); roofline at %s/s (%s, read+write copy)\n",
		r0.InputLen, r0.OutputLen, r0.MaxNumBatchedTokens, r0.Iterations, humanBytes(r0.Roofline.Bandwidth), r0.Roofline.BandwidthSource)
	if r0.CPUUtilization > 0 {
		fmt.Fprintf(w, "process CPU use while measuring: %s of GOMAXPROCS=%d (a shared machine shows below 100%%)\n",
			cpuList(results), runtime.GOMAXPROCS(0))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "batch\tTTFT ms\tprefill tok/s\tstep p50 ms\tstep p90 ms\tforward p50 ms\tengine ms/step\tbackend host ms\tdecode tok/s\te2e s\toutput tok/s\tctx\tbytes/step\troofline ms\t% of roofline\t")
	for _, r := range results {
		host := "n/a"
		if r.BackendHostMS != nil {
			host = fmt.Sprintf("%.3f", *r.BackendHostMS)
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%.1f\t%.2f\t%.1f\t%d\t%s\t%.3f\t%.0f%%\t\n",
			r.Batch, r.PrefillMS, r.PrefillTokensPerSecond, r.DecodeStep.P50, r.DecodeStep.P90, r.DecodeForward.P50, r.EngineOverheadMS, host,
			r.DecodeTokensPerSecond, r.TotalMS/1e3, r.OutputTokensPerSecond, r.Roofline.Context,
			humanBytes(float64(r.Roofline.Bytes.Total)), r.Roofline.StepMS, r.Roofline.Percent)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	perToken := float64(0)
	if r0.Roofline.Context > 0 && r0.Batch > 0 {
		perToken = float64(r0.Roofline.Bytes.KV) / float64(r0.Batch*r0.Roofline.Context)
	}
	_, err := fmt.Fprintf(w, "bytes/step = weights %s + embedding rows + every sequence's KV at ctx (%s per token); ctx is the mean context of the decode steps\n",
		humanBytes(float64(r0.Roofline.Bytes.Weights)), humanBytes(perToken))
	return err
}

// WriteText prints a throughput result.
func (r *ThroughputResult) WriteText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "model %s (%s %s weights) on %s: %d prompts, input %s, output %s tokens, max %d sequences\n"+
		"  %d prompt + %d output tokens in %.2f s (%d steps, %d of them pipelined, %.1f tokens sampled per step, %d preemptions)\n"+
		"  requests/s     %.2f\n  output tok/s   %.1f\n  total tok/s    %.1f\n",
		r.Model, weightsKind(r.RandomWeights), strings.ToLower(r.DType), r.Device, r.NumPrompts, r.InputLen, r.OutputLen,
		r.MaxNumSeqs, r.PromptTokens, r.OutputTokens, r.Seconds, r.Steps, r.PipelinedSteps, r.MeanDecodeBatch, r.Preemptions,
		r.RequestsPerSecond, r.OutputTokensPerSecond, r.TotalTokensPerSecond)
	if err != nil || r.Roofline.BoundS <= 0 {
		return err
	}
	rf := &r.Roofline
	_, err = fmt.Fprintf(w, "  roofline: compute %.2f s (%.3g FLOP at %.3g FLOP/s), reads %.2f s (the weights of ≥ %d decode steps "+
		"and the decodes' K/V, %s, at %s/s): at most %.1f output tok/s; this run %.0f%% of it\n",
		rf.ComputeS, rf.FLOPs, rf.PeakFLOPS, rf.BandwidthS, rf.DecodeSteps, humanBytes(float64(rf.KVBytes)),
		humanBytes(rf.Bandwidth), rf.OutputTokensPerSecond, rf.Percent)
	return err
}

// WriteText prints a serve result.
func (r *ServeResult) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "%s model %q: %d prompts at concurrency %d, input %s, output %s tokens\n",
		r.URL, r.Model, r.NumPrompts, r.Concurrency, r.InputLen, r.OutputLen)
	if r.SharedPrefixLen > 0 {
		fmt.Fprintf(w, "  every prompt behind the same %d tokens (shared prefix)\n", r.SharedPrefixLen)
	}
	if r.MaxNumBatchedTokens > 0 {
		fmt.Fprintf(w, "  prefill in chunks of %d tokens (max batched tokens)", r.MaxNumBatchedTokens)
		if r.LongPrefillTokenThreshold > 0 {
			fmt.Fprintf(w, ", at most %d a prompt a step (long prefill token threshold)", r.LongPrefillTokenThreshold)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  completed %d, failed %d in %.2f s\n", r.Completed, r.Failed, r.Seconds)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
	fmt.Fprintf(w, "  requests/s %.2f   output tok/s %.1f   total tok/s %.1f\n",
		r.RequestsPerSecond, r.OutputTokensPerSecond, r.TotalTokensPerSecond)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  ms\tmean\tp50\tp90\tp99\t")
	for _, row := range []struct {
		name string
		s    Summary
	}{{"TTFT", r.TTFT}, {"ITL", r.ITL}, {"TPOT", r.TPOT}, {"E2E", r.E2E}} {
		fmt.Fprintf(tw, "  %s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", row.name, row.s.Mean, row.s.P50, row.s.P90, row.s.P99)
	}
	for _, c := range []struct {
		name  string
		class *ServeClass
	}{{"short", r.Short}, {"long", r.Long}} {
		if c.class == nil {
			continue
		}
		fmt.Fprintf(tw, "  %s prompts (%s tokens, %d completed)\t\t\t\t\t\n", c.name, c.class.InputLen, c.class.Completed)
		for _, row := range []struct {
			name string
			s    Summary
		}{{"TTFT", c.class.TTFT}, {"ITL", c.class.ITL}, {"E2E", c.class.E2E}} {
			fmt.Fprintf(tw, "  %s %s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", c.name, row.name, row.s.Mean, row.s.P50, row.s.P90, row.s.P99)
		}
	}
	return tw.Flush()
}

// cpuList is each result's CPU utilization, "97%, 95%".
func cpuList(results []*LatencyResult) string {
	parts := make([]string, len(results))
	for i, r := range results {
		parts[i] = fmt.Sprintf("%.0f%%", r.CPUUtilization)
	}
	return strings.Join(parts, ", ")
}

// layerBytesText says the layers' weight bytes when they differ from the rest's (FP8 layers).
func layerBytesText(p Precision) string {
	if p.LayerWeightBytes == 0 || p.LayerWeightBytes == p.WeightBytes {
		return ""
	}
	return fmt.Sprintf(" (%d-byte in the layers)", p.LayerWeightBytes)
}
