package reconciler

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeRESTConfig is the client configuration of cfg.Kubernetes: its
// kubeconfig file, or the in-cluster service-account token when none is
// set. Client-side rate limits are raised from client-go's defaults (5 QPS)
// so that many concurrent runs are not throttled by the client.
func KubeRESTConfig(cfg *Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubernetes.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubernetes.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes.kubeconfig: %w", err)
		}
	} else if rc, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("kubernetes: no kubeconfig set and not running in a cluster: %w", err)
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "signet-reconciler/" + cfg.Cluster
	return rc, nil
}
