package kube

import (
	"context"
	"errors"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lease timings of the leader election: a new leader takes over at most
// LeaseDuration after the old one stopped renewing.
const (
	LeaseDuration = 30 * time.Second
	RenewDeadline = 20 * time.Second
	RetryPeriod   = 5 * time.Second
)

// ErrLostLease is returned by Lead when the lease was lost while leading:
// the process must stop acting at once (another replica may already lead).
var ErrLostLease = errors.New("leader election: lease lost")

// Lead blocks until this replica (identity) holds the coordination.k8s.io
// Lease ns/name, then runs lead with a context that is canceled as soon as
// the lease is lost or ctx ends. It returns nil when ctx ended and
// ErrLostLease when the lease was lost; lead's own return does not end the
// leadership. Only one replica of the daemon acts on the evidence branch
// and the nodes at a time.
func Lead(ctx context.Context, client kubernetes.Interface, ns, name, identity string, log *slog.Logger, lead func(ctx context.Context)) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(ns, name),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	lost := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: LeaseDuration, RenewDeadline: RenewDeadline, RetryPeriod: RetryPeriod,
		ReleaseOnCancel: true, Name: name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leader election: leading", "lease", ns+"/"+name, "identity", identity)
				lead(ctx)
				<-ctx.Done()
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					close(lost)
				}
			},
			OnNewLeader: func(id string) {
				if id != identity {
					log.Info("leader election: another replica leads", "lease", ns+"/"+name, "leader", id)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	select {
	case <-lost:
		return ErrLostLease
	default:
		return nil
	}
}

func metav1ObjectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}
