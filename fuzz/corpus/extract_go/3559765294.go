// Package metrics exports the perf harness metrics; dw_comment_total is a comment.
package metrics

import "github.com/prometheus/client_golang/prometheus"

/* "server:block-comment:" */

type (
	Store struct{ prefix string }
	Reason int
)

type RequestMetrics struct{}

var requests = prometheus.NewCounterVec(
	prometheus.CounterOpts{Subsystem: "go", Namespace: "dw", Name: "requests_total", Help: "Requests."},
	[]string{"status", "policy"},
)

var latency = promauto.NewHistogram(prometheus.HistogramOpts{
	Name:        "dw_go_latency_seconds",
	ConstLabels: prometheus.Labels{"region": "eu"},
})

var dynamic = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dw_go_dynamic"}, labelNames)

func (s *Store) Key(ns string) string {
	quote := '"'
	_ = quote
	return "server:go-store:" + ns + `:raw` + "server:" + "joined:"
}

func Raw() string {
	return `server:raw:
dw_go_raw_total{kind="x"} 1`
}

const namespace = "dw"

var scoped = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "dw_go_scoped_total"}, []string{"a"})

var hidden = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "dw", Subsystem: sub, Name: "hidden_total"})

var foreign = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "other", Name: "dw_go_foreign_total"})

var plain = prometheus.NewGauge(prometheus.GaugeOpts{
	Name:      "up",
	Namespace: "dw",
})
