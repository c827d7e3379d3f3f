package openai

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics under the "gollm:" prefix, each with a model_name
// label (Config.ModelName) as vLLM's have. Where vLLM has a metric of the same meaning its name is
// kept (vllm:num_requests_running is gollm:num_requests_running; time_to_first_token_seconds,
// inter_token_latency_seconds, e2e_request_latency_seconds, prompt_tokens_total,
// generation_tokens_total, request_success_total by finished_reason, kv_cache_usage_perc,
// prefix_cache_queries_total, prefix_cache_hits_total, num_preemptions_total); the rest are gollm's
// own. Engine state (running, waiting, KV usage, prefix cache, preemptions) is read from Engine.Stats
// at scrape time; request metrics are observed by the handlers. Each Server has its own registry,
// which also carries the Go runtime's collector (go_goroutines, heap) and the process collector
// (process_resident_memory_bytes, open file descriptors), without the label, so leaks show on
// /metrics.
type metrics struct {
	reg *prometheus.Registry

	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	requestsFinished *prometheus.CounterVec
	rejected         prometheus.Counter
	panics           prometheus.Counter
	ttft             prometheus.Histogram
	interToken       prometheus.Histogram
	e2e              prometheus.Histogram
}

// latencyBuckets cover CPU inference (slow) to GPU decode steps (milliseconds), in seconds.
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}

func newMetrics(modelName string, eng Engine, admitted, handling func() float64) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{"model_name": modelName}, m.reg)
	m.promptTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "gollm:prompt_tokens_total",
		Help: "Prompt tokens of admitted sequences (counted once per choice)."})
	m.generationTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "gollm:generation_tokens_total",
		Help: "Generated tokens of finished requests."})
	m.requestsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gollm:request_success_total",
		Help: "Finished sequences, by finish reason."}, []string{"finished_reason"})
	m.rejected = prometheus.NewCounter(prometheus.CounterOpts{Name: "gollm:request_rejected_total",
		Help: "Requests refused with 429 because the queue was full."})
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{Name: "gollm:request_panics_total",
		Help: "Requests whose handling panicked (answered with 500; the server kept serving)."})
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gollm:server_sequences_admitted",
		Help: "Engine sequences the HTTP server has admitted and not yet seen finish."}, admitted)
	handlers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gollm:http_requests_in_flight",
		Help: "HTTP requests being handled (this scrape included)."}, handling)
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gollm:time_to_first_token_seconds",
		Help: "Time from receiving a request to its first generated token.", Buckets: latencyBuckets})
	m.interToken = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gollm:inter_token_latency_seconds",
		Help: "Time between consecutive generated tokens of a sequence (averaged over tokens delivered together).", Buckets: latencyBuckets})
	m.e2e = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gollm:e2e_request_latency_seconds",
		Help: "Time from receiving a request to its last token.", Buckets: latencyBuckets})
	labelled.MustRegister(m.promptTokens, m.generationTokens, m.requestsFinished, m.rejected, m.panics, inFlight, handlers, m.ttft, m.interToken, m.e2e,
		engineCollector{eng})
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// engineCollector exports Engine.Stats at scrape time.
type engineCollector struct{ eng Engine }

var (
	descRunning   = prometheus.NewDesc("gollm:num_requests_running", "Sequences in the running batch.", nil, nil)
	descWaiting   = prometheus.NewDesc("gollm:num_requests_waiting", "Sequences waiting to be scheduled.", nil, nil)
	descKVUsage   = prometheus.NewDesc("gollm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).", nil, nil)
	descKVUsed    = prometheus.NewDesc("gollm:kv_cache_blocks_used", "KV cache blocks held by sequences.", nil, nil)
	descKVCached  = prometheus.NewDesc("gollm:kv_cache_blocks_cached", "Free KV cache blocks still holding reusable prefixes.", nil, nil)
	descKVTotal   = prometheus.NewDesc("gollm:kv_cache_blocks_total", "KV cache blocks in the pool.", nil, nil)
	descHitRate   = prometheus.NewDesc("gollm:prefix_cache_hit_rate", "Prompt tokens found in the prefix cache over those looked up.", nil, nil)
	descQueries   = prometheus.NewDesc("gollm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", nil, nil)
	descHits      = prometheus.NewDesc("gollm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", nil, nil)
	descPreempt   = prometheus.NewDesc("gollm:num_preemptions_total", "Sequences preempted (KV freed, to be recomputed).", nil, nil)
	descSteps     = prometheus.NewDesc("gollm:engine_steps_total", "Engine steps run.", nil, nil)
	descPipelined = prometheus.NewDesc("gollm:engine_pipelined_steps_total", "Engine steps queued before the previous step's tokens were read (pipelined decode).", nil, nil)
	descPrefilled = prometheus.NewDesc("gollm:prefill_tokens_computed_total", "Prompt tokens computed by the engine, recomputation included.", nil, nil)
	descNonFinite = prometheus.NewDesc("gollm:non_finite_logits_total", "Requests ended with an error because the model's logits for them held NaN or +Inf.", nil, nil)
)

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKVUsage, descKVUsed, descKVCached, descKVTotal,
		descHitRate, descQueries, descHits, descPreempt, descSteps, descPipelined, descPrefilled, descNonFinite} {
		ch <- d
	}
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.eng.Stats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(descRunning, float64(st.Running))
	gauge(descWaiting, float64(st.Waiting))
	gauge(descKVUsage, st.KVUsage)
	gauge(descKVUsed, float64(st.KVBlocksUsed))
	gauge(descKVCached, float64(st.KVBlocksCached))
	gauge(descKVTotal, float64(st.KVBlocksTotal))
	gauge(descHitRate, st.PrefixHitRate)
	counter(descQueries, float64(st.PrefixQueriedTokens))
	counter(descHits, float64(st.PrefixHitTokens))
	counter(descPreempt, float64(st.Preemptions))
	counter(descSteps, float64(st.Steps))
	counter(descPipelined, float64(st.PipelinedSteps))
	counter(descPrefilled, float64(st.PromptTokens))
	counter(descNonFinite, float64(st.NonFiniteLogits))
}
