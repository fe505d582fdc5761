package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/testenv"
)

// TestMetrics scrapes the real /metrics of a daemon that did work (one
// run failed and retains its node, one request waits for that node,
// one waits for approval) and checks that promlint (the linter of
// `promtool check metrics`) finds no problem in it, that the state
// gauges say what /status says, and that every query of deploy/monitoring
// (the PrometheusRule's alerts, the Grafana dashboard's panels and
// variables) names a metric in it.
// worked is a daemon that did work: run a-broken failed and retains the
// node, request b-waits waits for that node (NodesBusy) and c-unapproved
// for approval (NotApproved).
type worked struct {
	d                 *daemon
	repo              *testenv.Repo
	keys              *testenv.Keys
	config, tokenFile string
}

func startWorkedDaemon(t *testing.T) *worked {
	t.Helper()
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("bad", "", testenv.Check{Name: "bad", Script: "result Fail; exit 1"})
	repo.AddProfile("quick", "", testenv.Check{Name: "quick", Script: "result Pass; exit 0"})
	// Objects are acted on by name: a-broken takes the node first.
	repo.AddRequest("a-broken", "bad")
	repo.AddRequest("b-waits", "quick")
	repo.AddRequest("c-unapproved", "quick")
	repo.Commit("requests")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/bad", "CertificationProfile/quick", "CertificationRequest/a-broken", "CertificationRequest/b-waits")

	dir := t.TempDir()
	addr, metrics := freeAddr(t), freeAddr(t)
	token := filepath.Join(dir, "trigger-token")
	require.NoError(t, os.WriteFile(token, []byte("trigger-token\n"), 0o600))
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `apiVersion: signet.dev/v1alpha1
kind: ReconcilerConfig
cluster: worked
spec:
  url: %s
  branch: main
trustPolicy: %s
signingKey: %s
stateDir: %s
interval: 3600s
listen: %s
metricsListen: %s
triggerTokenFile: %s
backends:
  local:
    enabled: true
    grace: 1s
    workRoot: %s
`, repo.Dir, keys.TrustFile, keys.ReconcilerFile, filepath.Join(dir, "state"), addr, metrics, token, filepath.Join(testenv.WorldDir(t), "work")), 0o600))
	d := startDaemon(t, config, addr)
	d.metrics = metrics
	require.Eventually(t, func() bool {
		st := d.status()
		var broken, waits bool
		for _, r := range st.Runs {
			broken = broken || (r.ID == "a-broken" && r.Phase == evidence.PhaseDone)
		}
		for _, o := range st.Objects {
			for _, c := range o.Conditions {
				waits = waits || (o.Name == "b-waits" && c.Type == meta.ReadyCondition && c.Reason == "NodesBusy")
			}
		}
		return broken && waits
	}, 60*time.Second, 100*time.Millisecond, "a-broken never finished, or b-waits never waited for its node")
	return &worked{d: d, repo: repo, keys: keys, config: config, tokenFile: token}
}

func TestMetrics(t *testing.T) {
	d := startWorkedDaemon(t).d
	text := d.body("/metrics")
	parser := expfmt.NewTextParser(model.LegacyValidation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	var mfs []*dto.MetricFamily
	for _, mf := range parsed {
		mfs = append(mfs, mf)
	}

	t.Run("promlint", func(t *testing.T) {
		problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
		require.NoError(t, err)
		assert.Empty(t, problems)
	})

	t.Run("state gauges", func(t *testing.T) {
		for _, line := range []string{
			"signet_runs_in_progress 0",
			`signet_retained_nodes{run="a-broken"} 1`,
			`signet_requests_waiting{reason="NodesBusy"} 1`,
			`signet_requests_waiting{reason="NotApproved"} 1`,
			`signet_certified_nodes{profile="bad"} 0`,
			`signet_certified_nodes_expiring_24h{profile="quick"} 0`,
			"signet_evidence_push_failures_total 0",
			`signet_runs_total{verdict="Fail"} 1`,
		} {
			assert.Contains(t, text, "\n"+line+"\n")
		}
		// Exactly the two requests that wait: a-broken, which ran, is not
		// waiting, whatever its Ready says.
		waiting := map[string]float64{}
		for _, m := range parsed["signet_requests_waiting"].GetMetric() {
			waiting[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
		assert.Equal(t, map[string]float64{"NodesBusy": 1, "NotApproved": 1}, waiting, "requests waiting by reason")
		require.Contains(t, parsed, "signet_build_info")
		bi := parsed["signet_build_info"].GetMetric()
		require.Len(t, bi, 1)
		assert.Equal(t, 1.0, bi[0].GetGauge().GetValue())
		labels := map[string]string{}
		for _, l := range bi[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		assert.NotEmpty(t, labels["version"])
		assert.True(t, strings.HasPrefix(labels["goversion"], "go"), "goversion %q", labels["goversion"])
		last := parsed["signet_last_successful_reconcile_timestamp_seconds"].GetMetric()
		require.Len(t, last, 1)
		assert.WithinDuration(t, time.Now(), time.Unix(int64(last[0].GetGauge().GetValue()), 0), time.Minute)
	})

	exported := map[string]bool{}
	for name, mf := range parsed {
		exported[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[name+s] = true
			}
		}
	}
	t.Run("PrometheusRule", func(t *testing.T) {
		b, err := os.ReadFile("../../deploy/monitoring/prometheusrule.yaml")
		require.NoError(t, err)
		var rule struct {
			Spec struct {
				Groups []struct {
					Rules []struct {
						Alert string `json:"alert"`
						Expr  string `json:"expr"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal(b, &rule), "prometheusrule.yaml")
		n := 0
		for _, g := range rule.Spec.Groups {
			for _, r := range g.Rules {
				n++
				names := promqlMetricNames(r.Expr)
				assert.NotEmpty(t, names, "alert %s: %q names no metric", r.Alert, r.Expr)
				for _, m := range names {
					assert.True(t, exported[m], "alert %s: %q names %s, which signet does not export", r.Alert, r.Expr, m)
				}
			}
		}
		assert.GreaterOrEqual(t, n, 4)
	})
	t.Run("Grafana dashboard", func(t *testing.T) {
		b, err := os.ReadFile("../../deploy/monitoring/dashboards/signet.json")
		require.NoError(t, err)
		var dash struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Name  string `json:"name"`
					Type  string `json:"type"`
					Query string `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		require.NoError(t, json.Unmarshal(b, &dash), "signet.json")
		require.NotEmpty(t, dash.Panels)
		for _, p := range dash.Panels {
			require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
			for _, q := range p.Targets {
				names := promqlMetricNames(q.Expr)
				assert.NotEmpty(t, names, "panel %q: %q names no metric", p.Title, q.Expr)
				for _, m := range names {
					assert.True(t, exported[m], "panel %q: %q names %s, which signet does not export", p.Title, q.Expr, m)
				}
			}
		}
		for _, v := range dash.Templating.List {
			if v.Type != "query" {
				continue
			}
			// Grafana's label_values(metric, label): not PromQL.
			args, ok := strings.CutPrefix(v.Query, "label_values(")
			require.True(t, ok, "variable %s: %q", v.Name, v.Query)
			m, _, _ := strings.Cut(args, ",")
			assert.True(t, exported[strings.TrimSpace(m)], "variable %s: %q names %s, which signet does not export", v.Name, v.Query, m)
		}
	})
}

// TestPromQLMetricNames: the extraction the monitoring test relies on
// finds the selectors' metric names and nothing else (functions,
// aggregations, keywords, label names, strings, durations, numbers).
func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`time() - signet_last_successful_reconcile_timestamp_seconds > 15 * 60`, "signet_last_successful_reconcile_timestamp_seconds"},
		{`sum by (reason) (signet_requests_waiting{instance=~"a|b", x!="sum(y)"}) > 0`, "signet_requests_waiting"},
		{`histogram_quantile(0.99, sum without (pod) (rate(a_bucket[$__rate_interval] offset 5m)))`, "a_bucket"},
		{`a / on (run) group_left (profile) b or vector(0) unless c * 1e3`, "a b c"},
		{`{__name__="x"} + NaN + Inf`, ""},
		{`x:recorded:rate5m and bool y`, "x:recorded:rate5m y"},
	} {
		assert.Equal(t, tc.want, strings.Join(promqlMetricNames(tc.expr), " "), tc.expr)
	}
}

// promqlMetricNames returns the metric names of expr's selectors, in
// order. It is a lexer, not a parser (the PromQL parser lives in the
// prometheus/prometheus module, too large a dependency for one test): it
// skips strings, label matchers ({…}), ranges ([…]), numbers and
// durations, identifiers followed by "(" (functions), the aggregation
// operators and keywords, and the label lists after by, without, on, ignoring,
// group_left and group_right. A selector written only as
// {__name__="…"} is not seen.
func promqlMetricNames(expr string) []string {
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
	// Aggregations may put their by/without clause before the "(".
	for _, agg := range []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"} {
		keywords[agg] = true
	}
	labelLists := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	var out []string
	skipTo := func(i int, close byte) int {
		for i < len(expr) && expr[i] != close {
			if c := expr[i]; c == '"' || c == '\'' || c == '`' {
				i = skipString(expr, i)
				continue
			}
			i++
		}
		return i + 1
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
		case c == '{':
			i = skipTo(i+1, '}')
		case c == '[':
			i = skipTo(i+1, ']')
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (expr[i] == '.' || expr[i] == '_' || expr[i] >= '0' && expr[i] <= '9' || expr[i] >= 'a' && expr[i] <= 'z' || expr[i] >= 'A' && expr[i] <= 'Z') {
				i++
			}
		case c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z' || expr[j] >= '0' && expr[j] <= '9') {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			switch {
			case labelLists[strings.ToLower(word)]:
				if k < len(expr) && expr[k] == '(' {
					k = skipTo(k+1, ')')
				}
				j = k
			case k < len(expr) && expr[k] == '(', keywords[strings.ToLower(word)]:
			default:
				out = append(out, word)
			}
			i = j
		default:
			i++
		}
	}
	return out
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		if s[i] == '\\' && q != '`' {
			i++
			continue
		}
		if s[i] == q {
			return i + 1
		}
	}
	return i
}
