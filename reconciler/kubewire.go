package reconciler

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/reconciler/kube"
	"signet.dev/signet/specs"
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

// buildKube wires the Kubernetes side of cfg: the Fleet (reserving for the
// evidence branch evidenceID) and the enabled
// pod and mpijob backends, all in the ceiling's namespace. Every request
// of their clients is counted in signet_kube_requests_total, registered
// with reg (when not nil).
func buildKube(cfg *Config, evidenceID string, log *slog.Logger, reg prometheus.Registerer, backends map[specs.Backend]Backend) (backend.Fleet, error) {
	rc, err := KubeRESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc.Wrap(countKubeRequests(newKubeRequests(reg)))
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	fo := kube.FleetOptions{Cluster: cfg.Cluster, Evidence: evidenceID, Logger: log}
	if ttl := time.Duration(cfg.Kubernetes.CertifyTTL) * time.Second; ttl > 0 {
		fo.Certify = &kube.CertifyOptions{TTL: ttl}
	}
	ns := cfg.Ceiling.Namespace
	if cfg.Backends.Pod.Enabled {
		backends[specs.BackendPod] = kube.NewPodBackend(client, kube.PodOptions{Namespace: ns, SignetImage: cfg.Kubernetes.SignetImage, Logger: log})
	}
	if cfg.Backends.MPIJob.Enabled {
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		backends[specs.BackendMPIJob] = kube.NewMPIJobBackend(dyn, client, kube.MPIJobOptions{Namespace: ns, SignetImage: cfg.Kubernetes.SignetImage, Logger: log})
	}
	return kube.NewFleet(client, fo), nil
}
