package loadtest

import (
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	page := `# HELP gollm:num_requests_running Sequences in the running batch.
# TYPE gollm:num_requests_running gauge
gollm:num_requests_running{model_name="m"} 3
# TYPE gollm:request_success_total counter
gollm:request_success_total{finished_reason="length",model_name="m"} 2
gollm:request_success_total{finished_reason="stop",model_name="m"} 5
# TYPE gollm:e2e_request_latency_seconds histogram
gollm:e2e_request_latency_seconds_bucket{model_name="m",le="1"} 1
gollm:e2e_request_latency_seconds_bucket{model_name="m",le="+Inf"} 2
gollm:e2e_request_latency_seconds_sum{model_name="m"} 1.5
gollm:e2e_request_latency_seconds_count{model_name="m"} 2
# TYPE go_goroutines gauge
go_goroutines 11
`
	got, err := ParseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{"gollm:num_requests_running": 3, `gollm:request_success_total{finished_reason="length"}`: 2,
		`gollm:request_success_total{finished_reason="stop"}`: 5, "gollm:e2e_request_latency_seconds_sum": 1.5,
		"gollm:e2e_request_latency_seconds_count": 2, "go_goroutines": 11}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if _, err := ParseMetrics(strings.NewReader("gollm:x{ 1\n")); err == nil {
		t.Error("a malformed page parsed")
	}
}
