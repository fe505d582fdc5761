package deploy_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestMonitoringComponent builds an overlay of deploy/base with the
// deploy/monitoring component, as docs/deploy.md says to, and finds the
// PrometheusRule and the Grafana dashboard's ConfigMap (labelled for the
// dashboard sidecar, holding dashboards/signet.json byte for byte) in it,
// and checks that its ServiceMonitor scrapes the base's metrics Service.
// Which metrics their queries name is checked against a real daemon's
// /metrics by TestMetrics in cmd/signet.
func TestMonitoringComponent(t *testing.T) {
	base, err := filepath.Abs("base")
	require.NoError(t, err)
	mon, err := filepath.Abs("monitoring")
	require.NoError(t, err)
	overlay := t.TempDir()
	// kustomize takes no absolute path to another kustomization.
	base, err = filepath.Rel(overlay, base)
	require.NoError(t, err)
	mon, err = filepath.Rel(overlay, mon)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(
		"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- "+base+"\ncomponents:\n- "+mon+"\n"), 0o600))
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	require.NoError(t, err, "kustomize build of base + monitoring")
	dashboard, err := os.ReadFile("monitoring/dashboards/signet.json")
	require.NoError(t, err)
	var rule, cm bool
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		b, err := r.MarshalJSON()
		require.NoError(t, err)
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(b))
		objs = append(objs, u)
		switch {
		case r.GetKind() == "PrometheusRule" && r.GetName() == "signet-reconciler":
			rule = true
			assert.Equal(t, systemNS, r.GetNamespace())
		case r.GetKind() == "ConfigMap" && r.GetName() == "signet-grafana-dashboard":
			cm = true
			assert.Equal(t, systemNS, r.GetNamespace())
			assert.Equal(t, "1", r.GetLabels()["grafana_dashboard"])
			assert.Equal(t, string(dashboard), r.GetDataMap()["signet.json"])
		}
	}
	assert.True(t, rule, "no PrometheusRule signet-reconciler")
	assert.True(t, cm, "no ConfigMap signet-grafana-dashboard")

	// The ServiceMonitor scrapes the metrics Service: its selector matches
	// the Service's labels in the Service's namespace and its endpoints
	// name the Service's port (no CRD schema of the Prometheus Operator is
	// vendored, so this is structural).
	svc := metricsService(t, objs)
	var sm serviceMonitor
	decode(t, find(t, objs, "ServiceMonitor", systemNS, "signet-reconciler"), &sm)
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	require.NoError(t, err)
	assert.False(t, sel.Empty(), "the ServiceMonitor selects every Service")
	assert.True(t, sel.Matches(labels.Set(svc.Labels)), "ServiceMonitor selector %s does not match Service labels %v", sel, svc.Labels)
	assert.Equal(t, []string{svc.Namespace}, sm.Spec.NamespaceSelector.MatchNames)
	require.NotEmpty(t, sm.Spec.Endpoints)
	for _, e := range sm.Spec.Endpoints {
		assert.Equal(t, svc.Spec.Ports[0].Name, e.Port, "ServiceMonitor endpoint port")
	}
}
