package reconciler

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// ExpiringWithin is the horizon of signet_certified_nodes_expiring_24h.
const ExpiringWithin = 24 * time.Hour

// WaitingReasons are the reasons of signet_requests_waiting that are
// always exported (0 when no request waits for them), so that an alert on
// them has a series before the first request waits.
var WaitingReasons = []string{"NotApproved", "NodesBusy"}

// Metrics are the reconciler's Prometheus metrics: counters and a
// histogram updated as the reconciler works, and gauges of its state
// (runs, retained nodes, waiting requests, certified nodes) computed from
// Status and the Fleets at each scrape.
type Metrics struct {
	runs              *prometheus.CounterVec
	checks            *prometheus.CounterVec
	errors            *prometheus.CounterVec
	pushFailures      prometheus.Counter
	noops             prometheus.Counter
	lastSuccess       prometheus.Gauge
	reconcileDuration prometheus.Histogram
	state             *stateCollector
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
		pushFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "signet_evidence_push_failures_total", Help: "Evidence appends that failed to reach the evidence branch (a path that already exists is not a failure).",
		}),
		noops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "signet_reconcile_noop_total", Help: "Reconciles that found nothing changed.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "signet_last_successful_reconcile_timestamp_seconds", Help: "Unix time at which the last reconcile pass (a no-op included) ended without error; 0 before the first.",
		}),
		reconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "signet_reconcile_duration_seconds", Help: "Duration of reconcile passes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		state: &stateCollector{},
	}
	// Every place an error is counted exists from the start at 0, so that
	// the series is scraped (and rate() works) before the first error.
	for _, where := range []string{"reconcile", "run"} {
		m.errors.WithLabelValues(where)
	}
	if reg != nil {
		reg.MustRegister(m.runs, m.checks, m.errors, m.pushFailures, m.noops, m.lastSuccess, m.reconcileDuration, m.state)
	}
	return m
}

// RegisterBuildInfo registers signet_build_info (always 1) with the
// version signet was built as and the Go version that built it.
func RegisterBuildInfo(reg prometheus.Registerer, version string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "signet_build_info", Help: "Always 1; the labels say which signet runs.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	reg.MustRegister(g)
}

var (
	descRunsInProgress = prometheus.NewDesc("signet_runs_in_progress",
		"Runs admitted and not yet done (no receipt).", nil, nil)
	descRetained = prometheus.NewDesc("signet_retained_nodes",
		"Nodes a finished non-passing run retains until an approved release, by run.", []string{"run"}, nil)
	descWaiting = prometheus.NewDesc("signet_requests_waiting",
		"Requests not admitted, by the reason of their Ready=False condition (NotApproved, NodesBusy, ...).", []string{"reason"}, nil)
	descCertified = prometheus.NewDesc("signet_certified_nodes",
		"Nodes whose certification labels hold now, by profile (0 for every profile of the last pass).", []string{"profile"}, nil)
	descExpiring = prometheus.NewDesc("signet_certified_nodes_expiring_24h",
		"Certified nodes whose certification expires within 24 hours, by profile.", []string{"profile"}, nil)
	descStandingInUse = prometheus.NewDesc("signet_standing_budget_in_use",
		"Pool nodes a standing certification's budget counts as held or claimed, at the last pass.", []string{"standing"}, nil)
	descStandingAllowed = prometheus.NewDesc("signet_standing_budget_allowed",
		"A standing certification's budget in nodes for its pool, at the last pass.", []string{"standing"}, nil)
	descStandingNodes = prometheus.NewDesc("signet_standing_nodes",
		"A standing certification's pool nodes by their latest run of its profile (certified, expiring, failed, never), at the last pass.", []string{"standing", "state"}, nil)
	descStandingNext = prometheus.NewDesc("signet_standing_next_due_timestamp_seconds",
		"When the next pool node not yet due becomes due by time alone (Unix seconds); absent when none will.", []string{"standing"}, nil)
)

// stateCollector computes the state gauges at scrape time from its
// reconciler's Status and Fleets; before New attaches one it exports
// nothing.
type stateCollector struct {
	mu sync.Mutex
	r  *Reconciler
}

func (c *stateCollector) attach(r *Reconciler) {
	c.mu.Lock()
	c.r = r
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunsInProgress, descRetained, descWaiting, descCertified, descExpiring,
		descStandingInUse, descStandingAllowed, descStandingNodes, descStandingNext} {
		ch <- d
	}
}

// certifications lists the certifications of every Fleet that labels
// nodes; a Fleet that cannot list them adds an error naming its family and
// leaves the others listed.
//
// The listing is kept for certificationsTTL (certCache), so that clients
// polling /status (`signet get --watch`, `reconcile --now --wait`, every
// 200 ms) and scrapes do not each list the cluster's nodes.
func (r *Reconciler) certifications(ctx context.Context) ([]backend.Certification, []error) {
	c := &r.certs
	c.mu.Lock()
	defer c.mu.Unlock()
	now := r.now()
	if !c.at.IsZero() && now.Sub(c.at) < certificationsTTL && !now.Before(c.at) {
		return c.certs, c.errs
	}
	var certs []backend.Certification
	var errs []error
	for _, fam := range r.families {
		lister, ok := fam.Fleet.(backend.CertificationLister)
		if !ok {
			continue
		}
		l, err := lister.Certifications(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend family %s: listing certified nodes: %w", fam.Name, err))
			continue
		}
		certs = append(certs, l...)
	}
	c.at, c.certs, c.errs = now, certs, errs
	return certs, errs
}

// certificationsTTL is how long a certification listing is reused.
const certificationsTTL = 5 * time.Second

// certCache is the last certification listing and when it was made.
type certCache struct {
	mu    sync.Mutex
	at    time.Time
	certs []backend.Certification
	errs  []error
}

// certificationsTimeout bounds the Fleets' answer to one scrape.
const certificationsTimeout = 5 * time.Second

// Collect implements prometheus.Collector. A Fleet that cannot list its
// certifications is logged and left out of that scrape; the other gauges
// are still exported.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r := c.r
	c.mu.Unlock()
	if r == nil {
		return
	}
	st := r.Status()
	inProgress := 0
	for _, run := range st.Runs {
		if run.Phase != evidence.PhaseDone {
			inProgress++
		}
		if len(run.Retained) > 0 {
			ch <- prometheus.MustNewConstMetric(descRetained, prometheus.GaugeValue, float64(len(run.Retained)), run.ID)
		}
	}
	ch <- prometheus.MustNewConstMetric(descRunsInProgress, prometheus.GaugeValue, float64(inProgress))
	for _, o := range st.Objects {
		s := o.Standing
		if o.Kind != specs.KindStanding || s == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descStandingInUse, prometheus.GaugeValue, float64(s.InUse), o.Name)
		ch <- prometheus.MustNewConstMetric(descStandingAllowed, prometheus.GaugeValue, float64(s.Allowed), o.Name)
		for state, n := range map[string]int{"certified": s.Certified, "expiring": s.Expiring, "failed": s.Failed, "never": s.Never} {
			ch <- prometheus.MustNewConstMetric(descStandingNodes, prometheus.GaugeValue, float64(n), o.Name, state)
		}
		if !s.Next.IsZero() {
			ch <- prometheus.MustNewConstMetric(descStandingNext, prometheus.GaugeValue, float64(s.Next.Unix()), o.Name)
		}
	}

	waiting := map[string]int{}
	for _, reason := range WaitingReasons {
		waiting[reason] = 0
	}
	certified, expiring := map[string]int{}, map[string]int{}
	for _, o := range st.Objects {
		switch o.Kind {
		case specs.KindRequest:
			if reason, ok := waitingReason(o); ok {
				waiting[reason]++
			}
		case specs.KindProfile:
			certified[o.Name], expiring[o.Name] = 0, 0
		}
	}
	for reason, n := range waiting {
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(n), reason)
	}

	// Status listed the certifications (certificationsTimeout bounds it).
	now := r.now()
	if st.CertifiedError != "" {
		r.log.Warn("metrics: listing certified nodes", "error", st.CertifiedError)
	}
	for _, ct := range st.Certified {
		certified[ct.Profile]++
		if ct.Until.Before(now.Add(ExpiringWithin)) {
			expiring[ct.Profile]++
		}
	}
	for p, n := range certified {
		ch <- prometheus.MustNewConstMetric(descCertified, prometheus.GaugeValue, float64(n), p)
		ch <- prometheus.MustNewConstMetric(descExpiring, prometheus.GaugeValue, float64(expiring[p]), p)
	}
}

// waitingReason is the reason a request object waits: it has no run and
// its Ready condition is False.
func waitingReason(o ObjectStatus) (string, bool) {
	if o.Run != "" {
		return "", false
	}
	for _, c := range o.Conditions {
		if c.Type == meta.ReadyCondition && c.Status == metav1.ConditionFalse {
			return c.Reason, true
		}
	}
	return "", false
}
