package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// MPIJobGVR is the MPI Operator's v2beta1 MPIJob resource, the only
// version the mpijob backend speaks.
var MPIJobGVR = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v2beta1", Resource: "mpijobs"}

// Labels and annotations of the MPI Operator and Kueue that the mpijob
// backend reads or writes.
const (
	// MPIJobNameLabel and MPIJobRoleLabel are the labels the MPI Operator
	// puts on an MPIJob's pods; signet also writes them into its templates,
	// so that the workers' anti-affinity can name them.
	MPIJobNameLabel = "training.kubeflow.org/job-name"
	MPIJobRoleLabel = "training.kubeflow.org/job-role"
	MPIRoleLauncher = "launcher"
	MPIRoleWorker   = "worker"

	mpiHostnameLabel   = "kubernetes.io/hostname"
	mpiWorkerContainer = "worker"
	// mpiMaxNameLen keeps "<name>-worker-<63>" a DNS label (63 bytes):
	// the MPI Operator names pods and their hostnames after the job.
	mpiMaxNameLen = 63 - len("-worker-63")
)

// MPIJobOptions configures an MPIJobBackend.
type MPIJobOptions struct {
	// Namespace holds every object the backend creates.
	Namespace string
	// SignetImage is the digest-pinned signet image whose static binary the
	// launcher's init container copies in.
	SignetImage string
	// Logger receives the backend's progress; nil discards it.
	Logger *slog.Logger
	// PollInterval is how often an observed MPIJob is looked at again when
	// its watch reports no change (every change is looked at at once), and
	// how often Cleanup looks whether everything is gone; 1 s when zero.
	PollInterval time.Duration
	// MaxLogBytes bounds the kept tail of the launcher's log; 64 KiB when
	// zero.
	MaxLogBytes int
}

// MPIJobBackend runs an `mpijob` check as one kubeflow.org/v2beta1 MPIJob
// through the dynamic client (DESIGN §7): one unpinned launcher running the
// check's script through `signet exec`, one worker per participant on a
// distinct participant node. The launcher's result is the check's result for
// every participant, and only when every participant node holds exactly one
// of the job's workers and no worker ran elsewhere (DESIGN §4).
type MPIJobBackend struct {
	dyn    dynamic.Interface
	client kubernetes.Interface
	o      MPIJobOptions
	log    *slog.Logger
	// watchStarted, when set (tests only), is called with every watch
	// observe starts, before its first look.
	watchStarted func(*mpiWatch)
}

var _ backend.Backend = (*MPIJobBackend)(nil)

// NewMPIJobBackend returns the mpijob backend. It creates nothing until
// Run.
func NewMPIJobBackend(dyn dynamic.Interface, client kubernetes.Interface, o MPIJobOptions) *MPIJobBackend {
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.MaxLogBytes <= 0 {
		o.MaxLogBytes = 64 << 10
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &MPIJobBackend{dyn: dyn, client: client, o: o, log: log}
}

// MPIJobName is the name of the MPIJob of check index of run:
// "signet-<run>-<NN>" (the script ConfigMap's name too), or, when the
// operator's worker pod names "<name>-worker-<i>" would exceed a DNS label,
// the run shortened and followed by a hash of the whole run ID.
func MPIJobName(run string, index int) string {
	nn := fmt.Sprintf("%02d", index)
	name := "signet-" + run + "-" + nn
	if len(name) <= mpiMaxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(run))
	h := hex.EncodeToString(sum[:])[:10]
	keep := max(mpiMaxNameLen-len("signet-")-len(h)-len(nn)-2, 1)
	prefix := strings.TrimRight(run[:min(keep, len(run))], "-")
	return "signet-" + prefix + "-" + h + "-" + nn
}

// Describe names the ConfigMap and the MPIJob (one name, two kinds) and
// digests their canonical JSON. It reads nothing from the cluster.
func (b *MPIJobBackend) Describe(c *backend.CheckRun) ([]string, specs.Digest, error) {
	cm, job, err := b.render(c)
	if err != nil {
		return nil, "", err
	}
	canon, err := specs.CanonicalJSON(struct {
		ConfigMap *corev1.ConfigMap `json:"configMap"`
		MPIJob    map[string]any    `json:"mpiJob"`
	}{cm, job.Object})
	if err != nil {
		return nil, "", err
	}
	return []string{"configmap/" + cm.Name, "mpijob/" + job.GetName()}, specs.DigestOf(canon), nil
}

// Run creates the script ConfigMap and then the MPIJob, and observes the
// job until its launcher is terminal, c.Deadline passes, ctx is canceled or
// the job disappears. It leaves both objects for Cleanup. An error means
// nothing could be observed (creation failed); every observed ending is a
// report.
func (b *MPIJobBackend) Run(ctx context.Context, c *backend.CheckRun) (*backend.CheckReport, error) {
	cm, job, err := b.render(c)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	log := b.log.With("run", c.Run, "check", c.Check.Name, "mpijob", job.GetName())
	if _, err := b.client.CoreV1().ConfigMaps(b.o.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("mpijob backend: create ConfigMap %s/%s: %w", b.o.Namespace, cm.Name, err)
	}
	created, err := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("mpijob backend: create MPIJob %s/%s: %w", b.o.Namespace, job.GetName(), err)
	}
	log.Info("mpijob created", "uid", created.GetUID())
	return b.observe(ctx, c, string(created.GetUID()), started, log), nil
}

// Adopt observes the MPIJob of an intent written before a restart, as Run
// does, with the same binding of its pods to the job (poll). It never
// creates anything: a missing MPIJob is found=false, and so is one that
// carries another run's labels or was created before the intent
// (c.IntentAt): it is not this check's and is left alone.
func (b *MPIJobBackend) Adopt(ctx context.Context, c *backend.CheckRun) (*backend.CheckReport, bool, error) {
	name := MPIJobName(c.Run, c.Index)
	job, err := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("mpijob backend: get MPIJob %s/%s: %w", b.o.Namespace, name, err)
	}
	if !b.ours(c, job.GetLabels()) {
		return nil, false, nil
	}
	log := b.log.With("run", c.Run, "check", c.Check.Name, "mpijob", name)
	if why := createdBeforeIntent(job, c.IntentAt); why != "" {
		// Not the job signet created after this intent: nothing to adopt.
		log.Warn("mpijob not adopted", "uid", job.GetUID(), "reason", why)
		return nil, false, nil
	}
	log.Info("mpijob adopted", "uid", job.GetUID())
	started := job.GetCreationTimestamp().Time
	return b.observe(ctx, c, string(job.GetUID()), started, log), true, nil
}

func (b *MPIJobBackend) ours(c *backend.CheckRun, l map[string]string) bool {
	for k, v := range objectLabels(c) {
		if l[k] != v {
			return false
		}
	}
	return true
}

// Cleanup deletes the MPIJob (foreground: the garbage collector removes its
// pods first) and the script ConfigMap, then any pod of the check still left
// (selected by its labels, so also one the operator did not own through the
// MPIJob), and waits, bounded by ctx and two minutes, until all are gone.
// What is already gone is not an error; an MPIJob or ConfigMap of that name
// that carries another check's labels is left alone.
func (b *MPIJobBackend) Cleanup(ctx context.Context, c *backend.CheckRun) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	name, cmName := MPIJobName(c.Run, c.Index), checkBaseName(c.Run, c.Index)
	jobs := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace)
	cms := b.client.CoreV1().ConfigMaps(b.o.Namespace)
	pods := b.client.CoreV1().Pods(b.o.Namespace)
	sel := labels.SelectorFromSet(objectLabels(c)).String()
	fg := metav1.DeletePropagationForeground
	var errs []error

	if job, err := jobs.Get(ctx, name, metav1.GetOptions{}); err == nil && b.ours(c, job.GetLabels()) {
		uid := job.GetUID()
		err := jobs.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete mpijob/%s: %w", name, err))
		}
	} else if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("get mpijob/%s: %w", name, err))
	}
	if cm, err := cms.Get(ctx, cmName, metav1.GetOptions{}); err == nil && b.ours(c, cm.Labels) {
		err := cms.Delete(ctx, cmName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete configmap/%s: %w", cmName, err))
		}
	} else if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("get configmap/%s: %w", cmName, err))
	}
	if pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel}); err != nil {
		errs = append(errs, fmt.Errorf("list pods %s: %w", sel, err))
	} else {
		for _, p := range pl.Items {
			uid := p.UID
			err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("delete pod/%s: %w", p.Name, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("mpijob backend: cleanup of %s/%s: %w", b.o.Namespace, name, errors.Join(errs...))
	}
	for {
		left, rv, err := b.remaining(ctx, c, name, cmName, sel)
		if err == nil && len(left) == 0 {
			return nil
		}
		// The MPIJob (its foreground deletion ends after the garbage
		// collector removed its pods) and the pods are followed on
		// watches from what remaining read, so that Cleanup goes on when
		// the last one goes rather than at the next poll; the ConfigMap,
		// deleted without a finalizer, is read again.
		if err == nil && b.deletedOnWatches(ctx, c, name, sel, left, rv) && !slices.ContainsFunc(left, isConfigMap) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("mpijob backend: cleanup of %s/%s: %w", b.o.Namespace, name, err)
			}
			return fmt.Errorf("mpijob backend: cleanup of %s/%s: still present: %s", b.o.Namespace, name, strings.Join(left, ", "))
		case <-time.After(b.o.PollInterval):
		}
	}
}

// cleanupVersions are the resourceVersions remaining read the MPIJob and
// the pod list at.
type cleanupVersions struct{ job, pods string }

// remaining lists what Cleanup still waits for ("mpijob/NAME",
// "configmap/NAME", "pod/NAME"), and the resourceVersions it read.
func (b *MPIJobBackend) remaining(ctx context.Context, c *backend.CheckRun, name, cmName, sel string) ([]string, cleanupVersions, error) {
	var left []string
	var rv cleanupVersions
	job, err := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && b.ours(c, job.GetLabels()):
		left = append(left, "mpijob/"+name)
		rv.job = job.GetResourceVersion()
	case err != nil && !apierrors.IsNotFound(err):
		return nil, rv, err
	}
	cm, err := b.client.CoreV1().ConfigMaps(b.o.Namespace).Get(ctx, cmName, metav1.GetOptions{})
	switch {
	case err == nil && b.ours(c, cm.Labels):
		left = append(left, "configmap/"+cmName)
	case err != nil && !apierrors.IsNotFound(err):
		return nil, rv, err
	}
	pl, err := b.client.CoreV1().Pods(b.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, rv, err
	}
	rv.pods = pl.ResourceVersion
	for _, p := range pl.Items {
		left = append(left, "pod/"+p.Name)
	}
	return left, rv, nil
}

// deletedOnWatches follows the MPIJob and the pods named in left on
// watches from the resourceVersions remaining read them at, until each is
// deleted: true. It returns false when a watch cannot start or ends first
// (an expired resourceVersion, a closed connection, ctx done); the caller
// reads them again.
func (b *MPIJobBackend) deletedOnWatches(ctx context.Context, c *backend.CheckRun, name, sel string, left []string, rv cleanupVersions) bool {
	if slices.Contains(left, "mpijob/"+name) {
		w, err := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: rv.job})
		if err != nil || !deletedOnWatch(w, map[string]bool{name: true}) {
			return false
		}
	}
	pods := podsIn(left)
	if len(pods) == 0 {
		return true
	}
	w, err := b.client.CoreV1().Pods(b.o.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv.pods})
	return err == nil && deletedOnWatch(w, pods)
}
