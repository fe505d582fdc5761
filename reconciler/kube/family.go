package kube

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// FamilyName is the name the Kubernetes family registers under.
const FamilyName = "kubernetes"

// cacheWait bounds how long NewFamily waits for the Fleet's informers to
// list nodes and pods once.
const cacheWait = 30 * time.Second

func init() { reconciler.RegisterFamily(FamilyName, NewFamily) }

// RESTConfig is the client configuration of cfg.Kubernetes: its
// kubeconfig file, or the in-cluster service-account token when none is
// set. The client's rate limit is kubernetes.apiQPS and apiBurst (50 and
// 100 unless set; client-go's defaults of 5 would throttle concurrent runs).
func RESTConfig(cfg *reconciler.Config) (*rest.Config, error) {
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
	rc.QPS, rc.Burst = cfg.Kubernetes.RateLimit()
	rc.UserAgent = "signet-reconciler/" + cfg.Cluster
	return rc, nil
}

// NewFamily is the reconciler.FamilyFactory of the Kubernetes family, nil
// when neither backends.pod nor backends.mpijob is enabled: the Fleet
// (reserving for the evidence branch env.EvidenceID) and the enabled pod
// and mpijob backends, all in the ceiling's namespace. Every request of
// their clients is counted in signet_kube_requests_total, registered with
// env.Registerer (when not nil).
func NewFamily(ctx context.Context, env reconciler.FamilyEnv) (*backend.Family, error) {
	cfg := env.Config
	if !cfg.Backends.Pod.Enabled && !cfg.Backends.MPIJob.Enabled {
		return nil, nil
	}
	rc, err := RESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc.Wrap(countRequests(newRequestsCounter(env.Registerer)))
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	fo := FleetOptions{Cluster: cfg.Cluster, Evidence: env.EvidenceID, Now: env.Now, Logger: env.Logger, TaintOnly: cfg.Kubernetes.ReserveTaintOnly}
	if ttl := time.Duration(cfg.Kubernetes.CertifyTTL) * time.Second; ttl > 0 {
		fo.Certify = &CertifyOptions{TTL: ttl}
	}
	ns := cfg.Ceiling.Namespace
	fleet := NewFleet(client, fo)
	// Selection reads shared informers once they have listed (issue 19);
	// until then, and if they never do, it reads the API server.
	if !fleet.StartCache(ctx, cacheWait) {
		fleet.log.WarnContext(ctx, "node and pod cache not ready; selecting from the API server until it is", "waited", cacheWait)
	}
	fam := &backend.Family{Name: FamilyName, Fleet: fleet, Backends: map[specs.Backend]backend.Backend{}}
	if cfg.Backends.Pod.Enabled {
		fam.Backends[specs.BackendPod] = NewPodBackend(client, PodOptions{Namespace: ns, SignetImage: cfg.Kubernetes.SignetImage, Logger: env.Logger, NodeUIDs: fleet.CachedNodeUID})
	}
	if cfg.Backends.MPIJob.Enabled {
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		fam.Backends[specs.BackendMPIJob] = NewMPIJobBackend(dyn, client, MPIJobOptions{Namespace: ns, SignetImage: cfg.Kubernetes.SignetImage, Logger: env.Logger})
	}
	return fam, nil
}
