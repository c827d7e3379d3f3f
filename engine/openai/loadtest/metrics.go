package loadtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are the samples of a /metrics page by name: counters and gauges under their own name,
// histograms' counts and sums under NAME_count and NAME_sum. The model_name label every gollm
// metric carries is left out of the key; other labels are kept in it, sorted, as Prometheus writes
// them: gollm:request_success_total{finished_reason="length"}.
type Metrics map[string]float64

// ParseMetrics reads a Prometheus text exposition with Prometheus' own parser.
func ParseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := Metrics{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			key := name + labelKey(m.GetLabel())
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[key] = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				out[name+"_count"+labelKey(m.GetLabel())] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+labelKey(m.GetLabel())] = m.GetHistogram().GetSampleSum()
			case m.Summary != nil:
				out[name+"_count"+labelKey(m.GetLabel())] = float64(m.GetSummary().GetSampleCount())
				out[name+"_sum"+labelKey(m.GetLabel())] = m.GetSummary().GetSampleSum()
			}
		}
	}
	return out, nil
}

// labelKey writes the labels but model_name as {a="x",b="y"}, or "" when there are none.
func labelKey(labels []*dto.LabelPair) string {
	var parts []string
	for _, l := range labels {
		if l.GetName() != "model_name" {
			parts = append(parts, l.GetName()+"="+strconv.Quote(l.GetValue()))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// ScrapeMetrics reads baseURL's /metrics, with apiKey as the bearer token when it is not empty.
func ScrapeMetrics(ctx context.Context, baseURL, apiKey string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", baseURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: status %d", resp.StatusCode)
	}
	return ParseMetrics(resp.Body)
}
