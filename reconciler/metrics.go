package reconciler

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the reconciler's Prometheus metrics.
type Metrics struct {
	runs              *prometheus.CounterVec
	checks            *prometheus.CounterVec
	errors            *prometheus.CounterVec
	noops             prometheus.Counter
	reconcileDuration prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "signet_runs_total", Help: "Runs that reached their run evidence, by verdict.",
		}, []string{"verdict"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "signet_checks_total", Help: "Checks with durable evidence, by outcome.",
		}, []string{"outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "signet_reconcile_errors_total", Help: "Failed reconciles and run steps.",
		}, []string{"where"}),
		noops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "signet_reconcile_noop_total", Help: "Reconciles that found nothing changed.",
		}),
		reconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "signet_reconcile_duration_seconds", Help: "Duration of reconcile passes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
	}
	// Every place an error is counted exists from the start at 0, so that
	// the series is scraped (and rate() works) before the first error.
	for _, where := range []string{"reconcile", "run"} {
		m.errors.WithLabelValues(where)
	}
	if reg != nil {
		reg.MustRegister(m.runs, m.checks, m.errors, m.noops, m.reconcileDuration)
	}
	return m
}
