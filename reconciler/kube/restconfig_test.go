package kube

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/reconciler"
)

// TestRESTConfigRateLimit: the client the reconciler builds has the rate
// limit kubernetes.apiQPS and apiBurst say, 50 and 100 when unset.
func TestRESTConfigRateLimit(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))
	for _, tc := range []struct {
		qps, burst int
		wantQPS    float32
		wantBurst  int
	}{
		{0, 0, 50, 100},
		{300, 0, 300, 600},
		{300, 350, 300, 350},
	} {
		cfg := &reconciler.Config{Cluster: "c", Kubernetes: reconciler.KubernetesConfig{Kubeconfig: kubeconfig, APIQPS: tc.qps, APIBurst: tc.burst}}
		rc, err := RESTConfig(cfg)
		require.NoError(t, err)
		assert.Equal(t, tc.wantQPS, rc.QPS, "apiQPS %d", tc.qps)
		assert.Equal(t, tc.wantBurst, rc.Burst, "apiBurst %d", tc.burst)
	}
}
