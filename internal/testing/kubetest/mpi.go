package kubetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Names and labels of the MPI Operator v2 (github.com/kubeflow/mpi-operator,
// pkg/apis/kubeflow/v2beta1/constants.go and
// pkg/controller/mpi_job_controller.go), matched, not imported.
const (
	MPIOperatorName        = "mpi-operator"
	MPIOperatorNameLabel   = "training.kubeflow.org/operator-name"
	MPIJobNameLabel        = "training.kubeflow.org/job-name"
	MPIJobRoleLabel        = "training.kubeflow.org/job-role"
	MPIReplicaIndexLabel   = "training.kubeflow.org/replica-index"
	MPIRoleLauncher        = "launcher"
	MPIRoleWorker          = "worker"
	MPIConfigMountPath     = "/etc/mpi"
	mpiLauncherSuffix      = "-launcher"
	mpiWorkerSuffix        = "-worker"
	mpiConfigSuffix        = "-config"
	mpiConfigVolumeName    = "mpi-job-config"
	mpiHostfileName        = "hostfile"
	mpiDiscoverHostsName   = "discover_hosts.sh"
	mpiReasonCreated       = "MPIJobCreated"
	mpiReasonRunning       = "MPIJobRunning"
	mpiReasonSucceeded     = "MPIJobSucceeded"
	mpiReasonFailed        = "MPIJobFailed"
	mpiReplicaTypeLauncher = "Launcher"
	mpiReplicaTypeWorker   = "Worker"
)

// MPIOptions configures StartMPIOperator.
type MPIOptions struct {
	// Real runs the MPI Operator's own controller (MPIOperatorVersion,
	// in-process) instead of the stand-in; the MPIJob CRD must then be the
	// operator's (InstallRealMPIJobCRD). WrongNode, Resync and Stalled are
	// stand-in behaviours: setting any of them with Real fails the test.
	Real bool
	// WrongNode maps an MPIJob's name to a node name: that job's worker 0 is
	// created with spec.nodeName set to the node, bypassing the scheduler
	// (and so the job's affinity, taints and cordons), as a faulty operator
	// or a hostile user could.
	WrongNode map[string]string
	// Resync is how often every MPIJob is reconciled; 0 means 250 ms.
	Resync time.Duration
	// Stalled names MPIJobs (by name, any namespace) the stand-in never
	// reconciles, as an operator that is down or behind: nothing is
	// created for them and their status stays as it is.
	Stalled map[string]bool
}

// MPIOperator stands in for the MPI Operator v2 controller (kubeflow.org
// v2beta1 MPIJobs) and nothing else: it reconciles every MPIJob every
// Resync, as the admin, the way the operator's syncHandler does, with the
// operator's names, labels and condition reasons:
//
//   - status.conditions: Created (reason MPIJobCreated) at once; Running
//     (MPIJobRunning) once a launcher pod and every worker pod are Running;
//     Succeeded (MPIJobSucceeded) when the launcher Job is Complete, Failed
//     (the Job's Failed reason, else MPIJobFailed) when it Failed, both with
//     completionTime; status.startTime and status.replicaStatuses
//     (Launcher, Worker: active, succeeded, failed) as the operator counts
//     them.
//   - A ConfigMap <job>-config with an OpenMPI-style hostfile
//     ("<job>-worker-<i>.<job>.<ns>.svc slots=<slotsPerWorker>") and a
//     discover_hosts.sh listing every worker.
//   - Worker pods <job>-worker-<i>, i < Worker.replicas, from the Worker
//     template, created first, with hostname <job>-worker-<i>, subdomain
//     <job>, restartPolicy from the replica spec (ExitCode is Never), env
//     K_MPI_JOB_ROLE=worker, and the labels training.kubeflow.org/
//     operator-name=mpi-operator, job-name=<job>, job-role=worker,
//     replica-index=<i>. Unlike the operator it does not default an empty
//     command to /usr/sbin/sshd -De: the Agent runs a command-less
//     container as an idle daemon instead.
//   - The launcher, as the operator does, is a batch/v1 Job <job>-launcher
//     (labels app=<job>; backoffLimit, activeDeadlineSeconds and
//     ttlSecondsAfterFinished from runPolicy; podReplacementPolicy Failed),
//     whose single pod <job>-launcher-<random> the real Job controller of
//     kube-controller-manager creates. Its template gets the job-name and
//     job-role=launcher labels, hostname <job>-launcher, subdomain <job>,
//     restartPolicy from the replica spec (default OnFailure, ExitCode is
//     Never), env K_MPI_JOB_ROLE=launcher, and the config volume
//     mpi-job-config at /etc/mpi (hostfile 0444, discover_hosts.sh 0555).
//     The Job is created at start with the default launcherCreationPolicy
//     AtStartup (the operator's real default), and once every worker pod
//     is Ready with WaitForWorkersReady.
//   - Everything it creates has an ownerReference to the MPIJob with
//     controller=true and blockOwnerDeletion=true, so the real garbage
//     collector deletes it with the MPIJob. After the MPIJob finished,
//     cleanPodPolicy Running or All deletes the worker pods (default None
//     keeps them).
//
// It does not create the operator's headless Service, SSH key Secret and
// its volumes, PodGroups, or the Intel/MPICH environment variables (the
// launcher gets the OpenMPI ones and the emptied NVIDIA ones, as from the
// operator's default implementation); it does not validate MPIJobs, delete surplus
// workers, honour runPolicy.suspend or managedBy, emit events, or restart
// failed workers. Misbehaviour: MPIOptions.WrongNode, MPIOptions.Stalled.
type MPIOperator struct {
	e      *Env
	opts   MPIOptions
	client kubernetes.Interface
	dyn    dynamic.Interface
	cancel context.CancelFunc
	wg     sync.WaitGroup
	real   bool
}

// Real reports whether o is the MPI Operator's own controller rather than
// the stand-in.
func (o *MPIOperator) Real() bool { return o.real }

// StartMPIOperator starts the stand-in, or with opts.Real the real
// operator's controller; either stops in t.Cleanup. The MPIJob CRD must be
// installed (InstallMPIJobCRD, or InstallRealMPIJobCRD for the real one).
func (e *Env) StartMPIOperator(t testing.TB, opts MPIOptions) *MPIOperator {
	t.Helper()
	if opts.Real {
		if opts.WrongNode != nil || opts.Resync != 0 || opts.Stalled != nil {
			t.Fatalf("kubetest: MPIOptions WrongNode, Resync and Stalled are stand-in behaviours, not the real operator's")
		}
		return e.startRealMPIOperator(t)
	}
	if opts.Resync <= 0 {
		opts.Resync = 250 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &MPIOperator{e: e, opts: opts, client: e.Client, dyn: e.Dynamic(), cancel: cancel}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		tick := time.NewTicker(opts.Resync)
		defer tick.Stop()
		for {
			o.reconcileAll(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		o.wg.Wait()
	})
	return o
}

func (o *MPIOperator) reconcileAll(ctx context.Context) {
	list, err := o.dyn.Resource(MPIJobGVR).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			o.e.t.Logf("kubetest: mpi-operator: list mpijobs: %v", err)
		}
		return
	}
	for i := range list.Items {
		if o.opts.Stalled[list.Items[i].GetName()] {
			continue
		}
		if err := o.reconcile(ctx, &list.Items[i]); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
			o.e.t.Logf("kubetest: mpi-operator: %s/%s: %v", list.Items[i].GetNamespace(), list.Items[i].GetName(), err)
		}
	}
}

// The parts of the v2beta1 MPIJob the stand-in reads and writes.
type mpiJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SlotsPerWorker *int32 `json:"slotsPerWorker,omitempty"`
		RunPolicy      struct {
			CleanPodPolicy          *string `json:"cleanPodPolicy,omitempty"`
			TTLSecondsAfterFinished *int32  `json:"ttlSecondsAfterFinished,omitempty"`
			ActiveDeadlineSeconds   *int64  `json:"activeDeadlineSeconds,omitempty"`
			BackoffLimit            *int32  `json:"backoffLimit,omitempty"`
		} `json:"runPolicy"`
		MPIReplicaSpecs map[string]*struct {
			Replicas      *int32                 `json:"replicas,omitempty"`
			Template      corev1.PodTemplateSpec `json:"template"`
			RestartPolicy string                 `json:"restartPolicy,omitempty"`
		} `json:"mpiReplicaSpecs"`
		LauncherCreationPolicy string `json:"launcherCreationPolicy,omitempty"`
	} `json:"spec"`
	Status mpiJobStatus `json:"status"`
}

type mpiJobStatus struct {
	Conditions      []mpiJobCondition            `json:"conditions,omitempty"`
	ReplicaStatuses map[string]*mpiReplicaStatus `json:"replicaStatuses,omitempty"`
	StartTime       *metav1.Time                 `json:"startTime,omitempty"`
	CompletionTime  *metav1.Time                 `json:"completionTime,omitempty"`
}

type mpiJobCondition struct {
	Type               string                 `json:"type"`
	Status             corev1.ConditionStatus `json:"status"`
	Reason             string                 `json:"reason,omitempty"`
	Message            string                 `json:"message,omitempty"`
	LastUpdateTime     metav1.Time            `json:"lastUpdateTime,omitempty"`
	LastTransitionTime metav1.Time            `json:"lastTransitionTime,omitempty"`
}

type mpiReplicaStatus struct {
	Active    int32 `json:"active,omitempty"`
	Succeeded int32 `json:"succeeded,omitempty"`
	Failed    int32 `json:"failed,omitempty"`
}

func (s *mpiJobStatus) cond(t string) *mpiJobCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func (s *mpiJobStatus) isTrue(t string) bool {
	c := s.cond(t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// set follows the operator's setCondition: no change for the same status
// and reason; lastTransitionTime kept while the status is unchanged.
func (s *mpiJobStatus) set(t string, st corev1.ConditionStatus, reason, msg string) {
	now := metav1.Now()
	c := mpiJobCondition{Type: t, Status: st, Reason: reason, Message: msg, LastUpdateTime: now, LastTransitionTime: now}
	if cur := s.cond(t); cur != nil {
		if cur.Status == st && cur.Reason == reason {
			return
		}
		if cur.Status == st {
			c.LastTransitionTime = cur.LastTransitionTime
		}
	}
	kept := s.Conditions[:0]
	for _, x := range s.Conditions {
		if x.Type != t {
			kept = append(kept, x)
		}
	}
	s.Conditions = append(kept, c)
}

func (o *MPIOperator) reconcile(ctx context.Context, u *unstructured.Unstructured) error {
	var job mpiJob
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &job); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if job.DeletionTimestamp != nil {
		return nil
	}
	launcherSpec := job.Spec.MPIReplicaSpecs[mpiReplicaTypeLauncher]
	if launcherSpec == nil || len(launcherSpec.Template.Spec.Containers) == 0 {
		return errors.New("spec.mpiReplicaSpecs.Launcher.template has no container")
	}
	old := job.Status.asMap()
	st := &job.Status
	if len(st.Conditions) == 0 {
		st.set("Created", corev1.ConditionTrue, mpiReasonCreated, fmt.Sprintf("MPIJob %s/%s is created.", job.Namespace, job.Name))
	}
	if (st.isTrue("Succeeded") || st.isTrue("Failed")) && st.CompletionTime != nil {
		if p := job.Spec.RunPolicy.CleanPodPolicy; p != nil && (*p == "Running" || *p == "All") {
			if err := o.client.CoreV1().Pods(job.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: labels.SelectorFromSet(mpiLabels(job.Name, MPIRoleWorker)).String()}); err != nil {
				return err
			}
		}
		return o.writeStatus(ctx, u, &job, old)
	}
	if st.StartTime == nil {
		now := metav1.Now()
		st.StartTime = &now
	}
	jobs := o.client.BatchV1().Jobs(job.Namespace)
	launcher, err := jobs.Get(ctx, job.Name+mpiLauncherSuffix, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		launcher = nil
	} else if err != nil {
		return err
	} else if !metav1.IsControlledBy(launcher, &job) {
		return fmt.Errorf("job %s exists and is not controlled by the MPIJob", launcher.Name)
	}
	var workers []*corev1.Pod
	if launcher == nil || !jobFinished(launcher) {
		if err := o.ensureConfig(ctx, &job); err != nil {
			return err
		}
		if workers, err = o.ensureWorkers(ctx, &job); err != nil {
			return err
		}
		if launcher == nil && (job.Spec.LauncherCreationPolicy != "WaitForWorkersReady" || countReady(workers) == len(workers)) {
			if launcher, err = jobs.Create(ctx, o.newLauncherJob(&job), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create launcher job: %w", err)
			}
		}
	}

	// Status, as the operator's updateMPIJobStatus computes it.
	launcherRunning := 0
	if launcher != nil {
		pods, err := o.client.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(mpiLabels(job.Name, MPIRoleLauncher)).String(),
		})
		if err != nil {
			return err
		}
		for i := range pods.Items {
			if metav1.IsControlledBy(&pods.Items[i], launcher) && pods.Items[i].Status.Phase == corev1.PodRunning {
				launcherRunning++
			}
		}
		ls := &mpiReplicaStatus{Failed: launcher.Status.Failed}
		st.replicas()[mpiReplicaTypeLauncher] = ls
		switch {
		case jobCondTrue(launcher, batchv1.JobComplete):
			ls.Succeeded = 1
			if st.CompletionTime == nil {
				st.CompletionTime = launcher.Status.CompletionTime
				if st.CompletionTime == nil {
					now := metav1.Now()
					st.CompletionTime = &now
				}
			}
			st.set("Succeeded", corev1.ConditionTrue, mpiReasonSucceeded, fmt.Sprintf("MPIJob %s/%s successfully completed.", job.Namespace, job.Name))
		case jobCondTrue(launcher, batchv1.JobFailed):
			c := jobCond(launcher, batchv1.JobFailed)
			reason, msg := c.Reason, c.Message
			if reason == "" {
				reason = mpiReasonFailed
			}
			if msg == "" {
				msg = fmt.Sprintf("MPIJob %s/%s has failed", job.Namespace, job.Name)
			}
			if st.CompletionTime == nil {
				now := metav1.Now()
				st.CompletionTime = &now
			}
			st.set("Failed", corev1.ConditionTrue, reason, msg)
		default:
			ls.Active = int32(launcherRunning)
		}
	}
	ws := &mpiReplicaStatus{}
	st.replicas()[mpiReplicaTypeWorker] = ws
	running := 0
	for _, w := range workers {
		switch w.Status.Phase {
		case corev1.PodFailed:
			ws.Failed++
		case corev1.PodSucceeded:
			ws.Succeeded++
		case corev1.PodRunning:
			running++
			ws.Active++
		}
	}
	finished := st.isTrue("Succeeded") || st.isTrue("Failed")
	if !finished && launcher != nil && launcherRunning >= 1 && running == len(workers) {
		st.set("Running", corev1.ConditionTrue, mpiReasonRunning, fmt.Sprintf("MPIJob %s/%s is running.", job.Namespace, job.Name))
	}
	return o.writeStatus(ctx, u, &job, old)
}

func (s *mpiJobStatus) replicas() map[string]*mpiReplicaStatus {
	if s.ReplicaStatuses == nil {
		s.ReplicaStatuses = map[string]*mpiReplicaStatus{}
	}
	return s.ReplicaStatuses
}

// asMap returns the status as unstructured data, for comparison and UpdateStatus.
func (s *mpiJobStatus) asMap() map[string]any {
	m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	return m
}

func (o *MPIOperator) writeStatus(ctx context.Context, u *unstructured.Unstructured, job *mpiJob, old map[string]any) error {
	now := job.Status.asMap()
	if reflect.DeepEqual(old, now) {
		return nil
	}
	u = u.DeepCopy()
	u.Object["status"] = now
	_, err := o.dyn.Resource(MPIJobGVR).Namespace(job.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

func mpiLabels(job, role string) map[string]string {
	return map[string]string{MPIOperatorNameLabel: MPIOperatorName, MPIJobNameLabel: job, MPIJobRoleLabel: role}
}

func (o *MPIOperator) ownerRef(job *mpiJob) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{
		APIVersion: MPIJobGVR.GroupVersion().String(), Kind: "MPIJob", Name: job.Name, UID: job.UID,
		Controller: &t, BlockOwnerDeletion: &t,
	}
}

func workerCount(job *mpiJob) int {
	if w := job.Spec.MPIReplicaSpecs[mpiReplicaTypeWorker]; w != nil && w.Replicas != nil {
		return int(*w.Replicas)
	}
	return 0
}

func restartPolicy(p string, def corev1.RestartPolicy) corev1.RestartPolicy {
	switch p {
	case "":
		return def
	case "ExitCode":
		return corev1.RestartPolicyNever
	}
	return corev1.RestartPolicy(p)
}

func (o *MPIOperator) ensureConfig(ctx context.Context, job *mpiJob) error {
	slots := int32(1)
	if job.Spec.SlotsPerWorker != nil {
		slots = *job.Spec.SlotsPerWorker
	}
	var hosts, discover strings.Builder
	discover.WriteString("#!/bin/sh\n")
	for i := range workerCount(job) {
		h := fmt.Sprintf("%s%s-%d.%s.%s.svc", job.Name, mpiWorkerSuffix, i, job.Name, job.Namespace)
		fmt.Fprintf(&hosts, "%s slots=%d\n", h, slots)
		fmt.Fprintf(&discover, "echo %s:%d\n", h, slots)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name + mpiConfigSuffix, Namespace: job.Namespace,
			Labels:          map[string]string{"app": job.Name},
			OwnerReferences: []metav1.OwnerReference{o.ownerRef(job)},
		},
		Data: map[string]string{mpiHostfileName: hosts.String(), mpiDiscoverHostsName: discover.String()},
	}
	_, err := o.client.CoreV1().ConfigMaps(job.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (o *MPIOperator) ensureWorkers(ctx context.Context, job *mpiJob) ([]*corev1.Pod, error) {
	pods := o.client.CoreV1().Pods(job.Namespace)
	var out []*corev1.Pod
	for i := range workerCount(job) {
		name := fmt.Sprintf("%s%s-%d", job.Name, mpiWorkerSuffix, i)
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			p, err = pods.Create(ctx, o.newWorker(job, i), metav1.CreateOptions{})
		}
		if err != nil {
			return nil, fmt.Errorf("worker %s: %w", name, err)
		}
		if !metav1.IsControlledBy(p, job) {
			return nil, fmt.Errorf("pod %s exists and is not controlled by the MPIJob", name)
		}
		out = append(out, p)
	}
	return out, nil
}

func (o *MPIOperator) newWorker(job *mpiJob, i int) *corev1.Pod {
	spec := job.Spec.MPIReplicaSpecs[mpiReplicaTypeWorker]
	tpl := spec.Template.DeepCopy()
	name := fmt.Sprintf("%s%s-%d", job.Name, mpiWorkerSuffix, i)
	if tpl.Labels == nil {
		tpl.Labels = map[string]string{}
	}
	for k, v := range mpiLabels(job.Name, MPIRoleWorker) {
		tpl.Labels[k] = v
	}
	tpl.Labels[MPIReplicaIndexLabel] = strconv.Itoa(i)
	tpl.Spec.Hostname, tpl.Spec.Subdomain = name, job.Name
	tpl.Spec.RestartPolicy = restartPolicy(spec.RestartPolicy, corev1.RestartPolicyNever)
	if len(tpl.Spec.Containers) > 0 {
		c := &tpl.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "K_MPI_JOB_ROLE", Value: MPIRoleWorker})
	}
	if node := o.opts.WrongNode[job.Name]; node != "" && i == 0 {
		tpl.Spec.NodeName = node
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: job.Namespace, Labels: tpl.Labels, Annotations: tpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{o.ownerRef(job)},
		},
		Spec: tpl.Spec,
	}
}

func (o *MPIOperator) newLauncherJob(job *mpiJob) *batchv1.Job {
	spec := job.Spec.MPIReplicaSpecs[mpiReplicaTypeLauncher]
	tpl := spec.Template.DeepCopy()
	if tpl.Labels == nil {
		tpl.Labels = map[string]string{}
	}
	for k, v := range mpiLabels(job.Name, MPIRoleLauncher) {
		tpl.Labels[k] = v
	}
	name := job.Name + mpiLauncherSuffix
	tpl.Spec.Hostname, tpl.Spec.Subdomain = name, job.Name
	tpl.Spec.RestartPolicy = restartPolicy(spec.RestartPolicy, corev1.RestartPolicyOnFailure)
	c := &tpl.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "K_MPI_JOB_ROLE", Value: MPIRoleLauncher})
	// The operator's OpenMPI variables (its default implementation) and
	// the emptied NVIDIA variables, as it appends them.
	slots := int32(1)
	if job.Spec.SlotsPerWorker != nil {
		slots = *job.Spec.SlotsPerWorker
	}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "OMPI_MCA_orte_keep_fqdn_hostnames", Value: "true"},
		corev1.EnvVar{Name: "OMPI_MCA_orte_default_hostfile", Value: MPIConfigMountPath + "/" + mpiHostfileName},
		corev1.EnvVar{Name: "OMPI_MCA_plm_rsh_args", Value: "-o ConnectionAttempts=10"},
		corev1.EnvVar{Name: "OMPI_MCA_orte_set_default_slots", Value: strconv.Itoa(int(slots))},
		corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES"},
		corev1.EnvVar{Name: "NVIDIA_DRIVER_CAPABILITIES"},
	)
	ro, rx := int32(0o444), int32(0o555)
	tpl.Spec.Volumes = append(tpl.Spec.Volumes, corev1.Volume{
		Name: mpiConfigVolumeName,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: job.Name + mpiConfigSuffix},
			Items: []corev1.KeyToPath{
				{Key: mpiHostfileName, Path: mpiHostfileName, Mode: &ro},
				{Key: mpiDiscoverHostsName, Path: mpiDiscoverHostsName, Mode: &rx},
			},
		}},
	})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: mpiConfigVolumeName, MountPath: MPIConfigMountPath})
	failed := batchv1.Failed
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: job.Namespace, Labels: map[string]string{"app": job.Name},
			OwnerReferences: []metav1.OwnerReference{o.ownerRef(job)},
		},
		Spec: batchv1.JobSpec{
			TTLSecondsAfterFinished: job.Spec.RunPolicy.TTLSecondsAfterFinished,
			ActiveDeadlineSeconds:   job.Spec.RunPolicy.ActiveDeadlineSeconds,
			BackoffLimit:            job.Spec.RunPolicy.BackoffLimit,
			PodReplacementPolicy:    &failed,
			Template:                corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tpl.Labels, Annotations: tpl.Annotations}, Spec: tpl.Spec},
		},
	}
}

func countReady(pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

func jobCond(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if j.Status.Conditions[i].Type == t {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}

func jobCondTrue(j *batchv1.Job, t batchv1.JobConditionType) bool {
	c := jobCond(j, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

func jobFinished(j *batchv1.Job) bool {
	return jobCondTrue(j, batchv1.JobComplete) || jobCondTrue(j, batchv1.JobFailed)
}
