package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/procutil"
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
	// PollInterval is how often an observed MPIJob is read; 1 s when zero.
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

// render builds the script ConfigMap and the MPIJob of c. It is a pure
// function of c and the options, so that Describe digests exactly what Run
// creates.
func (b *MPIJobBackend) render(c *backend.CheckRun) (*corev1.ConfigMap, *unstructured.Unstructured, error) {
	w := c.Check.Workload
	switch {
	case w == nil:
		return nil, nil, fmt.Errorf("mpijob backend: check %q has no workload", c.Check.Name)
	case c.Check.GPUCount < 1:
		return nil, nil, fmt.Errorf("mpijob backend: check %q: gpuCount %d, an mpijob needs at least 1", c.Check.Name, c.Check.GPUCount)
	case len(c.Participants) == 0:
		return nil, nil, fmt.Errorf("mpijob backend: check %q has no participants", c.Check.Name)
	case b.o.SignetImage == "":
		return nil, nil, errors.New("mpijob backend: no signet image configured")
	case b.o.Namespace == "":
		return nil, nil, errors.New("mpijob backend: no namespace configured")
	}
	name := MPIJobName(c.Run, c.Index)
	lbl := objectLabels(c)
	cm, err := scriptConfigMap(c, b.o.Namespace)
	if err != nil {
		return nil, nil, fmt.Errorf("mpijob backend: %w", err)
	}
	key, err := scriptKey(c)
	if err != nil {
		return nil, nil, fmt.Errorf("mpijob backend: %w", err)
	}
	launcher, err := mpiTemplateObject(b.launcherTemplate(c, name, cm.Name, key, lbl))
	if err != nil {
		return nil, nil, err
	}
	worker, err := mpiTemplateObject(b.workerTemplate(c, name, lbl))
	if err != nil {
		return nil, nil, err
	}
	jobLabels := mpiCopyLabels(lbl)
	if w.Queue != "" {
		jobLabels[KueueQueueLabel] = w.Queue
	}
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": MPIJobGVR.GroupVersion().String(),
		"kind":       "MPIJob",
		"metadata": map[string]any{
			"name":        name,
			"namespace":   b.o.Namespace,
			"labels":      mpiStringMap(jobLabels),
			"annotations": map[string]any{DeadlineAnnotation: c.Deadline.UTC().Format(time.RFC3339)},
		},
		"spec": map[string]any{
			"slotsPerWorker":         int64(c.Check.GPUCount),
			"launcherCreationPolicy": "WaitForWorkersReady",
			"runPolicy": map[string]any{
				// signet removes the pods itself, after the evidence.
				"cleanPodPolicy": "None",
				// c.Deadline is the intent's time plus the check's
				// deadline; the operator counts from the job's start,
				// which comes later, so the job is never stopped before
				// c.Deadline, and signet stops observing at c.Deadline.
				// Derived from c alone so that Describe's digest holds.
				"activeDeadlineSeconds": int64(c.Check.Deadline),
				"backoffLimit":          int64(0),
			},
			"mpiReplicaSpecs": map[string]any{
				"Launcher": map[string]any{
					"replicas":      int64(1),
					"restartPolicy": string(corev1.RestartPolicyNever),
					"template":      launcher,
				},
				"Worker": map[string]any{
					"replicas":      int64(len(c.Participants)),
					"restartPolicy": string(corev1.RestartPolicyNever),
					"template":      worker,
				},
			},
		},
	}}
	return cm, job, nil
}

// launcherTemplate is the launcher: the pod backend's check container
// (signet exec on the verified script, copied in by the signet install init
// container; its exit code and termination message are the check's) with
// LauncherEnv, and unpinned, without GPUs, host paths, stage variable, Kueue
// topology annotation or service-account token. It gets the workload's
// image, cpu and memory and its user, never its privilege or capabilities:
// the launcher runs on whatever node the scheduler picks.
func (b *MPIJobBackend) launcherTemplate(c *backend.CheckRun, name, cmName, key string, lbl map[string]string) corev1.PodTemplateSpec {
	l := mpiCopyLabels(lbl)
	l[MPIJobNameLabel], l[MPIJobRoleLabel] = name, MPIRoleLauncher
	lc := *c
	lc.Check.GPUCount = 0
	w := *workload(c)
	w.HostPaths = nil
	lc.Check.Workload = &w
	ctr := checkContainer(&lc, key, c.LauncherEnv())
	sec := &specs.WorkloadSecurity{}
	if s := w.SecurityContext; s != nil {
		sec.RunAsUser, sec.RunAsNonRoot = s.RunAsUser, s.RunAsNonRoot
	}
	ctr.SecurityContext = securityContext(sec)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: l},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(30)),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			InitContainers:                []corev1.Container{signetInit(b.o.SignetImage)},
			Containers:                    []corev1.Container{ctr},
			Volumes: []corev1.Volume{
				{Name: binVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: scriptVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: cmName},
					DefaultMode:          ptr(int32(0o444)),
				}}},
				{Name: workVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// workerTemplate is one worker per participant: required node affinity to
// exactly the participant nodes, required anti-affinity among the job's
// workers on hostname, the reservation and cordon tolerations, the check's
// GPUs and the workload's image, security context, host network and
// read-only host paths. It has no command: the image's entrypoint (sshd)
// runs.
func (b *MPIJobBackend) workerTemplate(c *backend.CheckRun, name string, lbl map[string]string) corev1.PodTemplateSpec {
	w := c.Check.Workload
	l := mpiCopyLabels(lbl)
	l[MPIJobNameLabel], l[MPIJobRoleLabel] = name, MPIRoleWorker
	var ann map[string]string
	if w.RequiredTopologyLevel != "" {
		ann = map[string]string{KueueRequiredTopology: w.RequiredTopologyLevel}
	}
	nodes := make([]string, 0, len(c.Participants))
	for _, p := range c.Participants {
		nodes = append(nodes, p.Node)
	}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for i, hp := range w.HostPaths {
		vols = append(vols, corev1.Volume{Name: hostPathVolume(i), VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: hp.Path},
		}})
		mounts = append(mounts, corev1.VolumeMount{
			Name: hostPathVolume(i), MountPath: hp.MountPath, ReadOnly: true,
			RecursiveReadOnly: ptr(corev1.RecursiveReadOnlyIfPossible),
		})
	}
	var env []corev1.EnvVar
	if c.Check.Stage != "" {
		// The stage reaches participants only (DESIGN §2): here the
		// workers, never the launcher.
		env = []corev1.EnvVar{{Name: specs.EnvStageName, Value: c.Check.Stage}}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: l, Annotations: ann},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(30)),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			HostNetwork:                   w.HostNetwork,
			Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
						NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
							Key: mpiHostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: nodes,
						}}}},
					},
				},
				PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
							MPIJobNameLabel: name, MPIJobRoleLabel: MPIRoleWorker,
						}},
						TopologyKey: mpiHostnameLabel,
					}},
				},
			},
			Tolerations: []corev1.Toleration{
				{Key: ReservationTaintKey, Operator: corev1.TolerationOpEqual, Value: c.Run, Effect: corev1.TaintEffectNoSchedule},
				{Key: UnschedulableTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
			Containers: []corev1.Container{{
				Name:            mpiWorkerContainer,
				Image:           w.Image,
				Env:             env,
				Resources:       resources(w.Resources, c.Check.GPUCount),
				SecurityContext: securityContext(w.SecurityContext),
				VolumeMounts:    mounts,
			}},
			Volumes: vols,
		},
	}
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
// does. It never creates anything: a missing MPIJob is found=false, and so is
// one that carries another run's labels (it is not this check's and is left
// alone).
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

// operatorDeadlineSkew is how much earlier than signet's own deadline the
// launcher Job's activeDeadlineSeconds can end the launcher: Kubernetes
// stores the Job's start time with second precision.
const operatorDeadlineSkew = time.Second

// observation is what one poll saw.
type observation struct {
	launcher *corev1.Pod // nil while none exists
	workers  []corev1.Pod
	failed   string // the MPIJob's Failed condition, when set
	gone     string // why the job counts as gone behind signet's back
}

// observe polls until the launcher is terminal, c.Deadline, ctx's end, or
// the job (UID uid) or its launcher disappears, and builds the report.
func (b *MPIJobBackend) observe(ctx context.Context, c *backend.CheckRun, uid string, started time.Time, log *slog.Logger) *backend.CheckReport {
	name := MPIJobName(c.Run, c.Index)
	var last observation
	var seenLauncher bool
	for {
		// Past the deadline the operator's own activeDeadlineSeconds may
		// end or remove the launcher: what this poll sees is then the
		// deadline's doing. The operator's launcher Job counts its deadline
		// from a start time stored in whole seconds, so it can fire up to a
		// second before c.Deadline: that second counts as late too.
		late := !time.Now().Add(operatorDeadlineSkew).Before(c.Deadline)
		ob, err := b.poll(ctx, name, uid)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("mpijob poll failed", "err", err)
		case err == nil:
			if ob.launcher == nil && seenLauncher && ob.gone == "" {
				ob.gone = "launcher pod of MPIJob " + name + " disappeared behind signet's back"
			}
			if ob.gone != "" {
				// Keep the last identities seen: the workers ran there.
				term := specs.Termination{Started: seenLauncher, Reason: ob.gone}
				switch {
				case late:
					term.DeadlineExceeded = true
					term.Reason = "past the check's deadline " + c.Deadline.UTC().Format(time.RFC3339) + ": " + ob.gone
				case strings.HasPrefix(ob.failed, "DeadlineExceeded"):
					// The operator's activeDeadlineSeconds (counted on
					// its clock, in whole seconds) ended the launcher.
					term.DeadlineExceeded = true
					term.Reason = "MPIJob failed: " + ob.failed + "; " + ob.gone
				}
				log.Warn("mpijob gone", "reason", term.Reason)
				return b.report(ctx, c, started, last, term, nil, log)
			}
			last = ob
			if ob.launcher != nil {
				seenLauncher = true
				if t, res, done := launcherState(ob.launcher); done {
					if late && !t.Exited {
						t.DeadlineExceeded = true
					}
					return b.report(ctx, c, started, last, t, res, log)
				}
			} else if ob.failed != "" {
				term := specs.Termination{Reason: "MPIJob failed before its launcher ran: " + ob.failed}
				return b.report(ctx, c, started, last, term, nil, log)
			}
		}
		if ctx.Err() != nil {
			term, res, _ := launcherState(last.launcher)
			term.Canceled, term.Reason = true, mpiJoinReasons(term.Reason, "observation canceled before the launcher ended")
			return b.report(ctx, c, started, last, term, res, log)
		}
		if !time.Now().Before(c.Deadline) {
			term, res, _ := launcherState(last.launcher)
			term.DeadlineExceeded = true
			term.Reason = mpiJoinReasons(term.Reason, "launcher not terminal at the check's deadline "+c.Deadline.UTC().Format(time.RFC3339))
			return b.report(ctx, c, started, last, term, res, log)
		}
		wait := min(b.o.PollInterval, max(time.Until(c.Deadline), time.Millisecond))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// poll reads the MPIJob (which must still have UID uid), its launcher pod and
// its worker pods.
func (b *MPIJobBackend) poll(ctx context.Context, name, uid string) (observation, error) {
	var ob observation
	job, err := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ob.gone = "MPIJob " + name + " was deleted behind signet's back"
		return ob, nil
	case err != nil:
		return ob, err
	case string(job.GetUID()) != uid:
		ob.gone = fmt.Sprintf("MPIJob %s was replaced behind signet's back (uid %s, created as %s)", name, job.GetUID(), uid)
		return ob, nil
	case job.GetDeletionTimestamp() != nil:
		ob.gone = "MPIJob " + name + " is being deleted behind signet's back"
		return ob, nil
	}
	conds, _, _ := unstructured.NestedSlice(job.Object, "status", "conditions")
	for _, cv := range conds {
		m, _ := cv.(map[string]any)
		if m["type"] == "Failed" && m["status"] == "True" {
			ob.failed = fmt.Sprintf("%v: %v", m["reason"], m["message"])
		}
	}
	pods, err := b.client.CoreV1().Pods(b.o.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{MPIJobNameLabel: name}).String(),
	})
	if err != nil {
		return ob, err
	}
	var launchers []corev1.Pod
	for _, p := range pods.Items {
		switch p.Labels[MPIJobRoleLabel] {
		case MPIRoleLauncher:
			launchers = append(launchers, p)
		case MPIRoleWorker:
			ob.workers = append(ob.workers, p)
		}
	}
	switch len(launchers) {
	case 0:
	case 1:
		ob.launcher = &launchers[0]
	default:
		// backoffLimit 0: a second launcher means the check ran twice.
		var names []string
		for _, p := range launchers {
			names = append(names, p.Name)
		}
		ob.gone = fmt.Sprintf("MPIJob %s has %d launcher pods (%s); the check must run once", name, len(launchers), strings.Join(names, ", "))
	}
	sort.Slice(ob.workers, func(i, j int) bool { return ob.workers[i].Name < ob.workers[j].Name })
	return ob, nil
}

// launcherState is what the launcher's check container shows now, read as
// the pod backend reads a check pod, and its result; nil is a launcher never
// seen. done is true once the pod is terminal.
func launcherState(p *corev1.Pod) (term specs.Termination, result []byte, done bool) {
	if p == nil {
		return specs.Termination{Reason: "no launcher pod was created"}, nil, false
	}
	term, result, notes := podTermination(p)
	notes = append([]string{"launcher pod " + p.Name}, notes...)
	term.Reason = strings.Join(notes, "; ")
	return term, result, p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// report builds the per-participant reports of an ended observation:
// coverage first (DESIGN §4), then the launcher's termination and result
// for everyone.
func (b *MPIJobBackend) report(ctx context.Context, c *backend.CheckRun, started time.Time, ob observation, term specs.Termination, result []byte, log *slog.Logger) *backend.CheckReport {
	// The observation may have ended with ctx; what is left to read (nodes,
	// logs) is read under a short bound of its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ids, problems := b.coverage(rctx, c, ob.workers)
	if !term.Exited {
		result = nil
	}
	if len(problems) > 0 && !term.Canceled {
		why := "coverage: " + strings.Join(problems, "; ")
		term.Reason = mpiJoinReasons(why, term.Reason)
		if term.Exited {
			term.ResultRefused = why
		}
		result = nil
		log.Warn("mpijob coverage failed", "reason", why)
	}
	rep := &backend.CheckReport{StartedAt: started, EndedAt: time.Now()}
	for i, p := range c.Participants {
		pr := backend.ParticipantReport{Node: p.Node, Identity: ids[i], Termination: term}
		if result != nil {
			pr.Result = slices.Clone(result)
		}
		rep.Participants = append(rep.Participants, pr)
	}
	if ob.launcher != nil && len(rep.Participants) > 0 {
		rep.Participants[0].Stdout = b.launcherLog(rctx, ob.launcher, log)
	}
	return rep
}

// coverage matches the workers to the participants: every participant node
// must hold exactly one worker, no worker may be elsewhere or unscheduled,
// and each node's UID must be the admitted one. ids[i] identifies the
// worker on participant i's node; a participant left without one gets the
// identity of a misplaced worker, so that the evidence says where it ran.
func (b *MPIJobBackend) coverage(ctx context.Context, c *backend.CheckRun, workers []corev1.Pod) ([]evidence.Identity, []string) {
	ids := make([]evidence.Identity, len(c.Participants))
	var problems []string
	index := map[string]int{}
	for i, p := range c.Participants {
		index[p.Node] = i
		ids[i] = evidence.Identity{Node: p.Node}
	}
	onNode := map[string][]corev1.Pod{}
	var stray []evidence.Identity
	for _, w := range workers {
		node := w.Spec.NodeName
		if node == "" {
			problems = append(problems, fmt.Sprintf("worker %s was never scheduled", w.Name))
			continue
		}
		if _, ok := index[node]; !ok {
			problems = append(problems, fmt.Sprintf("worker %s ran on node %s, which is not a participant", w.Name, node))
			stray = append(stray, evidence.Identity{Workload: workerIdentity(&w), Node: node, NodeUID: b.nodeUID(ctx, node)})
			continue
		}
		onNode[node] = append(onNode[node], w)
	}
	for i, p := range c.Participants {
		ws := onNode[p.Node]
		switch {
		case len(ws) == 0:
			problems = append(problems, fmt.Sprintf("no worker ran on participant node %s", p.Node))
			if len(stray) > 0 {
				ids[i], stray = stray[0], stray[1:]
			}
			continue
		case len(ws) > 1:
			var names []string
			for _, w := range ws {
				names = append(names, w.Name)
			}
			problems = append(problems, fmt.Sprintf("%d workers (%s) ran on participant node %s", len(ws), strings.Join(names, ", "), p.Node))
		}
		uid := b.nodeUID(ctx, p.Node)
		ids[i] = evidence.Identity{Workload: workerIdentity(&ws[0]), Node: p.Node, NodeUID: uid}
		if uid != p.UID {
			problems = append(problems, fmt.Sprintf("worker %s ran on node %s with uid %q, admitted with uid %q", ws[0].Name, p.Node, uid, p.UID))
		}
	}
	return ids, problems
}

// workerIdentity names a worker pod as the pod backend names a check pod:
// "pod:<namespace>/<name>@<uid>", the API-assigned UID included.
func workerIdentity(p *corev1.Pod) string {
	return "pod:" + p.Namespace + "/" + p.Name + "@" + string(p.UID)
}

// nodeUID is the UID of the named node now; "" when it cannot be read.
func (b *MPIJobBackend) nodeUID(ctx context.Context, name string) string {
	n, err := b.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return string(n.UID)
}

// launcherLog is the bounded tail of the launcher's check container log;
// nil when it cannot be read (logs are never a reason to fail).
func (b *MPIJobBackend) launcherLog(ctx context.Context, p *corev1.Pod, log *slog.Logger) []byte {
	rc, err := b.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: checkContainerName}).Stream(ctx)
	if err != nil {
		log.Info("launcher log not readable", "pod", p.Name, "err", err)
		return nil
	}
	defer rc.Close()
	tail := procutil.NewTail(b.o.MaxLogBytes)
	// Read at most 64 times the kept size: a chatty launcher cannot hold
	// the reconciler for long.
	if _, err := io.Copy(tail, io.LimitReader(rc, int64(b.o.MaxLogBytes)*64)); err != nil {
		log.Info("launcher log read failed", "pod", p.Name, "err", err)
	}
	if out := tail.Bytes(); len(out) > 0 {
		return out
	}
	return nil
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
		left, err := b.remaining(ctx, c, name, cmName, sel)
		if err == nil && len(left) == 0 {
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

// remaining lists what Cleanup still waits for.
func (b *MPIJobBackend) remaining(ctx context.Context, c *backend.CheckRun, name, cmName, sel string) ([]string, error) {
	var left []string
	job, err := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && b.ours(c, job.GetLabels()):
		left = append(left, "mpijob/"+name)
	case err != nil && !apierrors.IsNotFound(err):
		return nil, err
	}
	cm, err := b.client.CoreV1().ConfigMaps(b.o.Namespace).Get(ctx, cmName, metav1.GetOptions{})
	switch {
	case err == nil && b.ours(c, cm.Labels):
		left = append(left, "configmap/"+cmName)
	case err != nil && !apierrors.IsNotFound(err):
		return nil, err
	}
	pl, err := b.client.CoreV1().Pods(b.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	for _, p := range pl.Items {
		left = append(left, "pod/"+p.Name)
	}
	return left, nil
}

func mpiTemplateObject(t corev1.PodTemplateSpec) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&t)
	if err != nil {
		return nil, fmt.Errorf("mpijob backend: pod template: %w", err)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return m, nil
}

func mpiCopyLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l)+2)
	for k, v := range l {
		out[k] = v
	}
	return out
}

func mpiStringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mpiJoinReasons(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
