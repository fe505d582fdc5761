package kubetest

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// podRun is the agent's state of one pod.
type podRun struct {
	a         *Agent
	pod       *corev1.Pod // as first seen
	misbehave Misbehaviour
	dir       string
	ctx       context.Context
	cancel    context.CancelCauseFunc
	done      chan struct{}
	volumes   map[string]string // volume name → directory

	deleteOnce sync.Once
	reportMu   sync.Mutex

	mu        sync.Mutex
	started   time.Time
	phase     corev1.PodPhase
	reason    string
	message   string
	initDone  bool
	initSt    []*ctrState
	mainSt    []*ctrState
	graceKill time.Duration
}

type ctrState struct {
	name, image string
	state       corev1.ContainerState
	id          string
	restarts    int32
	// probed: the running instance has a readinessProbe; ready: it last
	// passed it (see Agent).
	probed, ready bool
}

func (a *Agent) newPodRun(p *corev1.Pod) *podRun {
	ctx, cancel := context.WithCancelCause(a.ctx)
	r := &podRun{
		a: a, pod: p.DeepCopy(), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		dir:       filepath.Join(a.dir, p.Namespace+"_"+p.Name+"_"+string(p.UID)),
		volumes:   map[string]string{},
		phase:     p.Status.Phase,
		graceKill: 2 * time.Second,
	}
	if a.opts.Misbehave != nil {
		r.misbehave = a.opts.Misbehave(r.pod)
	}
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		r.graceKill = min(r.graceKill, time.Duration(*g)*time.Second)
	}
	waiting := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	}
	for _, c := range p.Spec.InitContainers {
		r.initSt = append(r.initSt, &ctrState{name: c.Name, image: c.Image, state: waiting("PodInitializing")})
	}
	first := "ContainerCreating"
	if len(p.Spec.InitContainers) > 0 {
		first = "PodInitializing"
	}
	for _, c := range p.Spec.Containers {
		r.mainSt = append(r.mainSt, &ctrState{name: c.Name, image: c.Image, state: waiting(first)})
	}
	return r
}

// startDeletion ends the pod's processes (TERM, then KILL after
// min(grace, 2 s)) and then confirms the deletion with grace period 0.
// NeverTerminate pods are left alone.
func (r *podRun) startDeletion(p *corev1.Pod) {
	if r.misbehave == NeverTerminate {
		return
	}
	r.deleteOnce.Do(func() {
		if g := p.DeletionGracePeriodSeconds; g != nil {
			r.mu.Lock()
			r.graceKill = min(r.graceKill, time.Duration(*g)*time.Second)
			r.mu.Unlock()
		}
		r.cancel(errPodDeleted)
		r.a.wg.Add(1)
		go func() {
			defer r.a.wg.Done()
			select {
			case <-r.done:
			case <-r.a.ctx.Done():
				return
			}
			r.a.deletePod(r.pod, "confirm deletion")
		}()
	})
}

// deletePod deletes p with grace period 0, guarded by its UID.
func (a *Agent) deletePod(p *corev1.Pod, why string) {
	uid := p.UID
	err := a.client.CoreV1().Pods(p.Namespace).Delete(a.ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && a.ctx.Err() == nil {
		a.e.t.Logf("kubetest: agent: %s of pod %s/%s: %v", why, p.Namespace, p.Name, err)
	}
}

// run runs the pod to its end and reports its status; it returns once no
// process of the pod is left.
func (r *podRun) run() {
	defer close(r.done)
	if r.phase == corev1.PodSucceeded || r.phase == corev1.PodFailed || r.pod.DeletionTimestamp != nil {
		return // terminal before this agent saw it, or never started
	}
	r.mu.Lock()
	r.started = time.Now()
	r.phase = corev1.PodPending
	r.mu.Unlock()
	r.report()

	ctx := r.ctx
	if ads := r.pod.Spec.ActiveDeadlineSeconds; ads != nil && r.misbehave != NeverTerminate {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(r.ctx, r.started.Add(time.Duration(*ads)*time.Second), errDeadline)
		defer cancel()
	}
	if !r.setupVolumes(ctx) {
		r.end(ctx)
		return
	}
	for i, c := range r.pod.Spec.InitContainers {
		code, ok := r.runContainer(ctx, r.initSt[i], c, true)
		if !ok {
			r.end(ctx)
			return
		}
		if code != 0 {
			r.setPhase(corev1.PodFailed, "", "")
			r.report()
			return
		}
	}
	r.mu.Lock()
	r.initDone = true
	r.mu.Unlock()
	var wg sync.WaitGroup
	codes := make([]int, len(r.pod.Spec.Containers))
	oks := make([]bool, len(codes))
	for i, c := range r.pod.Spec.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], oks[i] = r.runContainer(ctx, r.mainSt[i], c, false)
		}()
	}
	wg.Wait()
	if slices.Contains(oks, false) {
		r.end(ctx)
		return
	}
	phase := corev1.PodSucceeded
	for _, c := range codes {
		if c != 0 {
			phase = corev1.PodFailed
		}
	}
	r.setPhase(phase, "", "")
	r.report()
}

// end reports what ended the pod early: the deadline makes it Failed, and
// so does deletion, as a kubelet (1.27 on) puts a pod it deletes into a
// terminal phase before confirming the deletion (Kueue, for one, keeps its
// finalizer on a pod until then); disappearance and the agent's stop report
// nothing.
func (r *podRun) end(ctx context.Context) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errDeadline) && r.ctx.Err() == nil:
		r.setPhase(corev1.PodFailed, "DeadlineExceeded", DeadlineExceededMessage)
		r.report()
	case errors.Is(cause, errPodDeleted):
		r.setPhase(corev1.PodFailed, "", "")
		r.report()
	}
}

func (r *podRun) setPhase(phase corev1.PodPhase, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase, r.reason, r.message = phase, reason, msg
}

func (r *podRun) setState(st *ctrState, s corev1.ContainerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st.state = s
}

// report writes the pod's status as the agent knows it through
// UpdateStatus; a pod that is gone (or replaced under the same name) is
// left alone.
func (r *podRun) report() {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	if cause := context.Cause(r.ctx); r.ctx.Err() != nil && !errors.Is(cause, errDeadline) && !errors.Is(cause, errPodDeleted) {
		return
	}
	pods := r.a.client.CoreV1().Pods(r.pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pods.Get(r.a.ctx, r.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != r.pod.UID {
			return nil
		}
		r.buildStatus(&p.Status)
		_, err = pods.UpdateStatus(r.a.ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && r.a.ctx.Err() == nil {
		r.a.e.t.Logf("kubetest: agent: status of pod %s/%s: %v", r.pod.Namespace, r.pod.Name, err)
	}
}

// buildStatus fills s from the agent's state, keeping conditions it does
// not own (PodScheduled and others).
func (r *podRun) buildStatus(s *corev1.PodStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := metav1.NewTime(r.started)
	s.StartTime = &start
	s.Phase, s.Reason, s.Message = r.phase, r.reason, r.message
	s.HostIP, s.PodIP = PodIP, PodIP
	s.HostIPs = []corev1.HostIP{{IP: PodIP}}
	s.PodIPs = []corev1.PodIP{{IP: PodIP}}
	n := len(r.pod.Spec.InitContainers) + len(r.pod.Spec.Containers) + len(r.pod.Spec.EphemeralContainers)
	budget := MaxPodTerminationMessageLogLength / max(n, 1)
	statuses := func(sts []*ctrState, isInit bool) []corev1.ContainerStatus {
		var out []corev1.ContainerStatus
		for _, st := range sts {
			cs := corev1.ContainerStatus{
				Name: st.name, Image: st.image, ImageID: imageID(st.image, r.misbehave == WrongImage),
				ContainerID: st.id, RestartCount: st.restarts, State: *st.state.DeepCopy(),
			}
			if t := cs.State.Terminated; t != nil && len(t.Message) > budget {
				t.Message = t.Message[:budget]
			}
			running := cs.State.Running != nil
			cs.Started = &running
			cs.Ready = running && !isInit && (!st.probed || st.ready) || isInit && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
			out = append(out, cs)
		}
		return out
	}
	s.InitContainerStatuses = statuses(r.initSt, true)
	s.ContainerStatuses = statuses(r.mainSt, false)
	ready := r.phase == corev1.PodPending || r.phase == corev1.PodRunning
	allRunning := ready
	for _, cs := range s.ContainerStatuses {
		ready = ready && cs.Ready
		allRunning = allRunning && cs.State.Running != nil
	}
	if len(s.ContainerStatuses) > 0 && allRunning && r.phase == corev1.PodPending {
		s.Phase = corev1.PodRunning
		r.phase = corev1.PodRunning
	}
	cond := func(t corev1.PodConditionType, ok bool, reason string) {
		st := corev1.ConditionFalse
		if ok {
			st = corev1.ConditionTrue
			reason = ""
		}
		for i := range s.Conditions {
			if s.Conditions[i].Type == t {
				if s.Conditions[i].Status != st {
					s.Conditions[i].LastTransitionTime = metav1.Now()
				}
				s.Conditions[i].Status, s.Conditions[i].Reason = st, reason
				return
			}
		}
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: st, Reason: reason, LastTransitionTime: metav1.Now()})
	}
	notReady := "ContainersNotReady"
	if r.phase == corev1.PodSucceeded || r.phase == corev1.PodFailed {
		notReady = "PodCompleted"
	}
	cond(corev1.PodInitialized, r.initDone || len(r.initSt) == 0, "ContainersNotInitialized")
	cond(corev1.ContainersReady, ready, notReady)
	cond(corev1.PodReady, ready, notReady)
}

// imageID is the image ID a container runtime reports for a container
// started from image: as containerd and CRI-O do, the repository digest
// ("registry/repo@sha256:…", a tag dropped) of a digest-pinned reference,
// else the reference itself. With wrong, the digest is another one, as
// when a registry or mirror served other content under the reference.
func imageID(image string, wrong bool) string {
	name, digest, pinned := strings.Cut(image, "@")
	if !pinned {
		return image
	}
	if i := strings.LastIndex(name, "/"); strings.LastIndex(name, ":") > i {
		name = name[:strings.LastIndex(name, ":")]
	}
	if wrong {
		digest = "sha256:" + strings.Repeat("e", 64)
	}
	return name + "@" + digest
}
