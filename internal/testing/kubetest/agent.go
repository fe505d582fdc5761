package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"signet.dev/signet/internal/procutil"
)

// Termination message limits of the kubelet (k8s.io/kubernetes v1.34,
// pkg/kubelet/container/runtime.go). The kubelet reads at most the LAST
// MaxContainerTerminationMessageLength bytes of a container's termination
// message file (pkg/kubelet/kuberuntime/kuberuntime_container.go,
// getTerminationMessage, via pkg/util/tail.ReadAtMost, which seeks to
// size-max); with terminationMessagePolicy FallbackToLogsOnError, an empty or
// missing file and a non-zero exit, the message is the last
// MaxContainerTerminationMessageLogLines lines of the log, at most
// MaxContainerTerminationMessageLogLength bytes (its tail,
// readLastStringFromContainerLogs). The status manager then keeps only the
// FIRST MaxPodTerminationMessageLogLength / (init + regular + ephemeral
// containers) bytes of each container's message (pkg/kubelet/status/
// status_manager.go, normalizeStatus).
const (
	MaxContainerTerminationMessageLength    = 4 * 1024
	MaxPodTerminationMessageLogLength       = 12 * 1024
	MaxContainerTerminationMessageLogLength = 2 * 1024
	MaxContainerTerminationMessageLogLines  = 80
)

// DeadlineExceededMessage is the kubelet's pod status message when
// activeDeadlineSeconds passed (pkg/kubelet/active_deadline.go).
const DeadlineExceededMessage = "Pod was active on the node longer than the specified deadline"

// PodIP is the address the Agent reports as every pod's IP and host IP.
const PodIP = "127.0.0.1"

// Misbehaviour is a fault an Agent injects into one pod.
type Misbehaviour int

const (
	// None runs the pod as a kubelet would.
	None Misbehaviour = iota
	// NeverTerminate replaces every regular container's process (init
	// containers run normally) with one that ignores TERM, INT, HUP and QUIT
	// and never exits. The agent reports the pod Running and never a
	// terminal state; it also ignores activeDeadlineSeconds and deletion: it
	// neither signals the process nor confirms the deletion, so a deleted
	// pod stays Terminating until someone deletes it with grace period 0.
	// Only the pod object's disappearance or the Agent's stop kills the
	// process (KILL).
	NeverTerminate
	// LosePod deletes the pod through the API with grace period 0 as soon as
	// the agent has reported it Running, behind the back of whoever created
	// it, and kills its processes: the pod simply vanishes, as when a node
	// is lost and its pods are force-deleted.
	LosePod
	// WrongNode is not an Agent behaviour: MPIOptions.WrongNode makes the
	// MPI Operator stand-in bind a worker to a node of the test's choosing.
	// An Agent treats it as None.
	WrongNode
)

func (m Misbehaviour) String() string {
	switch m {
	case None:
		return "None"
	case NeverTerminate:
		return "NeverTerminate"
	case LosePod:
		return "LosePod"
	case WrongNode:
		return "WrongNode"
	}
	return "Misbehaviour(" + strconv.Itoa(int(m)) + ")"
}

// MisbehaveByName returns an AgentOptions.Misbehave that looks a pod's name
// up in m (any namespace); absent names get None.
func MisbehaveByName(m map[string]Misbehaviour) func(*corev1.Pod) Misbehaviour {
	return func(p *corev1.Pod) Misbehaviour { return m[p.Name] }
}

// AgentOptions configures StartAgent.
type AgentOptions struct {
	// Nodes are the node names whose pods the agent runs; empty means every
	// node.
	Nodes []string
	// Images maps an image reference, exactly as written in a container's
	// image field, to a local directory standing for that image's root
	// filesystem (see Agent for how paths are rewritten into it). When
	// Images is non-nil, a container whose image is not in it is never
	// started: it waits with reason ErrImagePull and its pod stays Pending.
	// When nil, no image has a root filesystem and no path is rewritten
	// into one.
	Images map[string]string
	// Misbehave, when set, picks a fault per pod, once, when the agent first
	// sees the pod.
	Misbehave func(pod *corev1.Pod) Misbehaviour
	// LogLimit is how many bytes of each container's output the agent keeps
	// (the tail); 0 means 1 MiB.
	LogLimit int
}

// Agent plays the kubelet of simulated nodes, as far as its container
// runtime goes, for every pod bound (spec.nodeName) to a node it serves. It
// watches pods through the real API server as the admin and, for each pod:
//
//   - Volumes: makes a temporary directory per pod; every emptyDir volume is
//     a directory in it; every configMap and secret volume is a directory
//     holding the object's data and binaryData (read through the API) as
//     files, with the items' paths and modes (default defaultMode, else
//     0644) — plain files, not the kubelet's atomically swapped ..data
//     symlink, and never updated afterwards; while a non-optional object is
//     missing the pod stays Pending (waiting ContainerCreating). A hostPath
//     volume is the host path itself. Any other volume type is not
//     supported: the pod stays Pending with reason ContainerCreating and a
//     message naming the volume.
//   - Paths: a container runs on the host's filesystem, not in one of its
//     own. Each command element, each arg, each env value and workingDir
//     that is an absolute path (as a whole; "--flag=/path" is not rewritten)
//     is rewritten, first match wins: (1) a path equal to or below a
//     volumeMount's mountPath of that container (the longest mountPath
//     wins) becomes the same path below the volume's directory (and
//     subPath); (2) a path equal to the container's terminationMessagePath
//     (default /dev/termination-log) becomes a per-container empty file
//     created before the start; (3) a path that exists below the image's
//     root directory (AgentOptions.Images) becomes that path; otherwise it
//     is left as it is. An unmapped workingDir is created below the pod's
//     directory; no workingDir means the image root, else the pod's
//     directory. $(VAR) references are not expanded.
//   - Environment: PATH is the host's (standing for the image's) and
//     HOSTNAME is spec.hostname or the pod name, both overridable by env;
//     env values and valueFrom.fieldRef of metadata.name,
//     metadata.namespace, metadata.uid, spec.nodeName, spec.serviceAccountName,
//     status.podIP and status.hostIP are set; any other valueFrom, and any
//     envFrom, leaves the container waiting with reason
//     CreateContainerConfigError (the pod stays Pending).
//   - Processes: init containers run in order, then all regular containers
//     concurrently, each as a local process in its own process group with
//     stdout and stderr kept in a bounded buffer (Logs). A container without
//     a command runs an idle process ("sleep infinity") until the pod is
//     deleted or its deadline passes — it stands in for a daemon such as a
//     worker's sshd; its args are then ignored. When a container's process
//     exits, whatever remains of its group is killed.
//   - restartPolicy: Never never restarts; OnFailure restarts a container
//     (and an init container) that exited non-zero, Always every regular
//     container that exited, after 1 s, counting restartCount.
//   - activeDeadlineSeconds, counted from the status.startTime the agent
//     sets: the process groups get TERM then KILL after
//     min(terminationGracePeriodSeconds, 2 s), and the pod becomes Failed
//     with reason DeadlineExceeded.
//   - Status, through UpdateStatus: startTime, hostIP and podIP PodIP at
//     once (phase Pending), Running with running container states
//     (startedAt, containerID kubetest://<pod uid>/<container>/<restart>),
//     then Succeeded when every regular container exited 0, else Failed,
//     with each container's terminated state (exitCode, 128+signal when
//     killed; reason Completed or Error; message per the kubelet's rule,
//     see MaxContainerTerminationMessageLength; startedAt, finishedAt).
//     Conditions Initialized, ContainersReady and Ready follow; no probe
//     runs, a running container is ready.
//   - Deletion: once a pod has a deletionTimestamp, its process groups get
//     TERM then KILL after min(grace, 2 s), and the agent deletes the pod with
//     grace period 0 (the kubelet's confirmation), so that foreground
//     deletion and garbage collection complete. A pod that disappears
//     without that is killed at once.
//
// It does not simulate images (nothing is pulled, the image is a directory),
// isolation (no namespaces, cgroups, resource limits or users: processes run
// as the test's user on the host network and filesystem), probes,
// lifecycle hooks, sidecar (restartPolicy Always) init containers,
// ephemeral containers, node status heartbeats, eviction, or the kubelet's
// API (pods/log, exec through the API server do not work: use Logs).
type Agent struct {
	e      *Env
	opts   AgentOptions
	client kubernetes.Interface
	dir    string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	pods     map[types.UID]*podRun
	logs     map[string]*procutil.Tail // "ns/pod/container"
}

// Causes of a pod's context ending, which decide how its processes end.
var (
	errPodDeleted   = errors.New("pod deleted")
	errPodGone      = errors.New("pod object gone")
	errAgentStopped = errors.New("agent stopped")
	errDeadline     = errors.New("active deadline exceeded")
)

// StartAgent starts an Agent for opts.Nodes; it stops in t.Cleanup (every
// process it started is killed; pods are left as they are in the API).
func (e *Env) StartAgent(t testing.TB, opts AgentOptions) *Agent {
	t.Helper()
	if opts.LogLimit <= 0 {
		opts.LogLimit = 1 << 20
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{
		e: e, opts: opts, client: e.Client, dir: t.TempDir(),
		ctx: ctx, cancel: cancel,
		pods: map[types.UID]*podRun{}, logs: map[string]*procutil.Tail{},
	}
	factory := informers.NewSharedInformerFactoryWithOptions(e.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.observe(obj) },
		UpdateFunc: func(_, obj any) { a.observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				a.mu.Lock()
				r := a.pods[p.UID]
				a.mu.Unlock()
				if r != nil {
					r.cancel(errPodGone)
					// As the kubelet's housekeeping does, a deleted pod's
					// volumes and container directories are removed once
					// its processes are gone, so that many pods do not
					// fill the disk.
					a.wg.Add(1)
					go func() {
						defer a.wg.Done()
						select {
						case <-r.done:
							_ = os.RemoveAll(r.dir)
						case <-a.ctx.Done():
						}
					}()
				}
			}
		},
	}); err != nil {
		t.Fatalf("kubetest: agent: %v", err)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		inf.Run(ctx.Done())
	}()
	t.Cleanup(a.stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatalf("kubetest: agent: pod informer did not sync")
	}
	return a
}

// Logs returns the kept tail of the output (stdout and stderr interleaved)
// of the named container, over all its restarts, also after the pod is
// gone; "" when the agent never ran it.
func (a *Agent) Logs(namespace, pod, container string) string {
	a.mu.Lock()
	tl := a.logs[namespace+"/"+pod+"/"+container]
	a.mu.Unlock()
	if tl == nil {
		return ""
	}
	return string(tl.Bytes())
}

// stop kills every process of every pod (KILL, the pods' own contexts
// first so that their cause is errAgentStopped) and waits for the agent's
// goroutines.
func (a *Agent) stop() {
	a.mu.Lock()
	a.stopping = true
	for _, r := range a.pods {
		r.cancel(errAgentStopped)
	}
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
}

func (a *Agent) serves(node string) bool {
	return node != "" && (len(a.opts.Nodes) == 0 || slices.Contains(a.opts.Nodes, node))
}

func (a *Agent) logTail(ns, pod, ctr string) *procutil.Tail {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := ns + "/" + pod + "/" + ctr
	if a.logs[k] == nil {
		a.logs[k] = procutil.NewTail(a.opts.LogLimit)
	}
	return a.logs[k]
}

// observe starts a pod's run when first seen and starts its deletion once
// it has a deletionTimestamp.
func (a *Agent) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !a.serves(p.Spec.NodeName) || a.ctx.Err() != nil {
		return
	}
	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		return
	}
	r := a.pods[p.UID]
	if r == nil {
		r = a.newPodRun(p)
		a.pods[p.UID] = r
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			r.run()
		}()
	}
	a.mu.Unlock()
	if p.DeletionTimestamp != nil {
		r.startDeletion(p)
	}
}

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

// end reports what ended the pod early: the deadline makes it Failed;
// deletion, disappearance and the agent's stop report nothing.
func (r *podRun) end(ctx context.Context) {
	if errors.Is(context.Cause(ctx), errDeadline) && r.ctx.Err() == nil {
		r.setPhase(corev1.PodFailed, "DeadlineExceeded", DeadlineExceededMessage)
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

// setupVolumes makes every volume's directory; while one cannot be made it
// reports the regular containers waiting ContainerCreating and retries.
// It returns false when ctx ended first.
func (r *podRun) setupVolumes(ctx context.Context) bool {
	for {
		err := r.makeVolumes(ctx)
		if err == nil {
			return true
		}
		for _, st := range r.mainSt {
			r.setState(st, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: err.Error()}})
		}
		r.report()
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

func (r *podRun) makeVolumes(ctx context.Context) error {
	for _, v := range r.pod.Spec.Volumes {
		dir := filepath.Join(r.dir, "volumes", v.Name)
		switch {
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return err
			}
		case v.HostPath != nil:
			dir = v.HostPath.Path
		case v.ConfigMap != nil:
			cm, err := r.a.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && v.ConfigMap.Optional != nil && *v.ConfigMap.Optional {
				cm = &corev1.ConfigMap{}
			} else if err != nil {
				return fmt.Errorf("volume %q: configmap %q: %w", v.Name, v.ConfigMap.Name, err)
			}
			data := map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			for k, b := range cm.BinaryData {
				data[k] = b
			}
			if err := writeVolume(dir, data, v.ConfigMap.Items, v.ConfigMap.DefaultMode); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
		case v.Secret != nil:
			s, err := r.a.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && v.Secret.Optional != nil && *v.Secret.Optional {
				s = &corev1.Secret{}
			} else if err != nil {
				return fmt.Errorf("volume %q: secret %q: %w", v.Name, v.Secret.SecretName, err)
			}
			if err := writeVolume(dir, s.Data, v.Secret.Items, v.Secret.DefaultMode); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
		default:
			return fmt.Errorf("volume %q: type not supported by the kubetest agent", v.Name)
		}
		r.volumes[v.Name] = dir
	}
	return nil
}

// writeVolume writes data into dir: the items' keys at their paths, or
// every key at its own name, with the item's mode, else defaultMode, else
// 0644.
func writeVolume(dir string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) error {
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %q not found", it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		p := filepath.Join(dir, filepath.Clean("/"+it.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return err
		}
		if err := os.Chmod(p, m); err != nil {
			return err
		}
	}
	return nil
}

// runContainer runs c, restarting it as the pod's restartPolicy says. ok is
// false when the pod's context ended (deadline, deletion, stop) or the
// container could not be started; code is the last exit code otherwise.
func (r *podRun) runContainer(ctx context.Context, st *ctrState, c corev1.Container, isInit bool) (code int, ok bool) {
	for {
		code, ok = r.runOnce(ctx, st, c, isInit)
		if !ok || ctx.Err() != nil {
			return code, false
		}
		policy := r.pod.Spec.RestartPolicy
		restart := (policy == corev1.RestartPolicyOnFailure || policy == corev1.RestartPolicyAlways) && code != 0 ||
			(policy == corev1.RestartPolicyAlways && !isInit)
		if !restart {
			return code, true
		}
		select {
		case <-ctx.Done():
			return code, false
		case <-time.After(time.Second):
		}
		r.mu.Lock()
		st.restarts++
		r.mu.Unlock()
	}
}

// runOnce starts one instance of c and waits for it; see Agent for what is
// simulated.
func (r *podRun) runOnce(ctx context.Context, st *ctrState, c corev1.Container, isInit bool) (int, bool) {
	fail := func(reason string, err error) (int, bool) {
		r.setState(st, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}})
		r.report()
		<-ctx.Done()
		return 0, false
	}
	root, haveRoot := r.a.opts.Images[c.Image]
	if r.a.opts.Images != nil && !haveRoot {
		return fail("ErrImagePull", fmt.Errorf("image %q is not in the agent's AgentOptions.Images", c.Image))
	}
	r.mu.Lock()
	restarts := st.restarts
	r.mu.Unlock()
	ctrDir := filepath.Join(r.dir, "containers", fmt.Sprintf("%s-%d", c.Name, restarts))
	if err := os.MkdirAll(ctrDir, 0o755); err != nil {
		return fail("RunContainerError", err)
	}
	termPath := c.TerminationMessagePath
	if termPath == "" {
		termPath = corev1.TerminationMessagePathDefault
	}
	termFile := filepath.Join(ctrDir, "termination-log")
	if err := os.WriteFile(termFile, nil, 0o666); err != nil {
		return fail("RunContainerError", err)
	}
	mapPath := r.pathMapper(c, termPath, termFile, root)

	env, err := r.env(c, mapPath)
	if err != nil {
		return fail("CreateContainerConfigError", err)
	}
	wd := root
	if c.WorkingDir != "" {
		wd = mapPath(c.WorkingDir)
		if wd == c.WorkingDir {
			wd = filepath.Join(ctrDir, "workdir", c.WorkingDir)
		}
	}
	if wd == "" {
		wd = r.dir
	}
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return fail("RunContainerError", err)
	}
	var argv []string
	switch {
	case r.misbehave == NeverTerminate && !isInit:
		argv = []string{"sh", "-c", "trap '' TERM INT HUP QUIT; while :; do sleep 1; done"}
	case len(c.Command) == 0:
		argv = []string{"sleep", "infinity"}
	default:
		for _, s := range append(slices.Clone(c.Command), c.Args...) {
			argv = append(argv, mapPath(s))
		}
	}
	logs := r.a.logTail(r.pod.Namespace, r.pod.Name, c.Name)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, wd
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	id := fmt.Sprintf("kubetest://%s/%s/%d", r.pod.UID, c.Name, restarts)
	if err := cmd.Start(); err != nil {
		now := metav1.Now()
		r.mu.Lock()
		st.id = id
		st.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now, ContainerID: id,
		}}
		r.mu.Unlock()
		r.report()
		return 128, true
	}
	startedAt := metav1.Now()
	pgid := cmd.Process.Pid
	r.mu.Lock()
	st.id = id
	st.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
	r.mu.Unlock()
	r.report()
	if !isInit && r.misbehave == LosePod {
		r.a.deletePod(r.pod, "LosePod")
	}

	// The exit status is read from cmd.ProcessState.
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-ctx.Done():
		cause := context.Cause(ctx)
		r.mu.Lock()
		grace := r.graceKill
		r.mu.Unlock()
		if errors.Is(cause, errPodGone) || errors.Is(cause, errAgentStopped) {
			grace = 0
			_ = procutil.SignalGroup(pgid, syscall.SIGKILL)
		}
		_, _, _ = procutil.StopGroup(pgid, time.Time{}, grace)
		<-waited
	}
	// The container ends with its main process: nothing of its group stays.
	_ = procutil.SignalGroup(pgid, syscall.SIGKILL)
	code := exitCode(cmd)
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	msg := r.terminationMessage(termFile, logs, c, code)
	r.mu.Lock()
	st.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, Message: msg,
		StartedAt: startedAt, FinishedAt: metav1.Now(), ContainerID: id,
	}}
	r.mu.Unlock()
	if ctx.Err() != nil {
		return code, false
	}
	r.report()
	return code, true
}

// exitCode is the container's exit code: 128+signal when killed.
func exitCode(cmd *exec.Cmd) int {
	ps := cmd.ProcessState
	if ps == nil {
		return 128
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if c := ps.ExitCode(); c >= 0 {
		return c
	}
	return 128
}

// terminationMessage is the kubelet's message of a terminated container:
// the last MaxContainerTerminationMessageLength bytes of the file; with
// FallbackToLogsOnError, an empty file and a non-zero exit, the log's last
// MaxContainerTerminationMessageLogLines lines within its last
// MaxContainerTerminationMessageLogLength bytes. (The per-pod budget is
// applied when the status is built.)
func (r *podRun) terminationMessage(termFile string, logs *procutil.Tail, c corev1.Container, code int) string {
	var data []byte
	if f, err := os.Open(termFile); err == nil {
		if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
			n := min(fi.Size(), MaxContainerTerminationMessageLength)
			data = make([]byte, n)
			_, _ = f.ReadAt(data, fi.Size()-n)
		}
		f.Close()
	}
	if len(data) > 0 || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || code == 0 {
		return string(data)
	}
	b := logs.Bytes()
	if len(b) > MaxContainerTerminationMessageLogLength {
		b = b[len(b)-MaxContainerTerminationMessageLogLength:]
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > MaxContainerTerminationMessageLogLines {
		lines = lines[len(lines)-MaxContainerTerminationMessageLogLines:]
	}
	return strings.Join(lines, "")
}

// pathMapper returns the rewrite of absolute paths documented on Agent.
func (r *podRun) pathMapper(c corev1.Container, termPath, termFile, root string) func(string) string {
	mounts := slices.Clone(c.VolumeMounts)
	sort.SliceStable(mounts, func(i, j int) bool { return len(mounts[i].MountPath) > len(mounts[j].MountPath) })
	return func(p string) string {
		if !filepath.IsAbs(p) {
			return p
		}
		clean := filepath.Clean(p)
		for _, m := range mounts {
			mp := filepath.Clean(m.MountPath)
			rest, ok := strings.CutPrefix(clean, mp)
			if !ok || (rest != "" && !strings.HasPrefix(rest, "/") && mp != "/") {
				continue
			}
			if dir, ok := r.volumes[m.Name]; ok {
				return filepath.Join(dir, filepath.Clean("/"+m.SubPath), rest)
			}
		}
		if clean == filepath.Clean(termPath) {
			return termFile
		}
		if root != "" {
			if _, err := os.Lstat(filepath.Join(root, clean)); err == nil {
				return filepath.Join(root, clean)
			}
		}
		return p
	}
}

// env is the container's environment; see Agent.
func (r *podRun) env(c corev1.Container, mapPath func(string) string) ([]string, error) {
	if len(c.EnvFrom) > 0 {
		return nil, errors.New("envFrom is not supported by the kubetest agent")
	}
	host := r.pod.Spec.Hostname
	if host == "" {
		host = r.pod.Name
	}
	vars := map[string]string{"PATH": os.Getenv("PATH"), "HOSTNAME": host}
	order := []string{"PATH", "HOSTNAME"}
	for _, ev := range c.Env {
		v := ev.Value
		if ev.ValueFrom != nil {
			f := ev.ValueFrom.FieldRef
			if f == nil {
				return nil, fmt.Errorf("env %s: only valueFrom.fieldRef is supported by the kubetest agent", ev.Name)
			}
			switch f.FieldPath {
			case "metadata.name":
				v = r.pod.Name
			case "metadata.namespace":
				v = r.pod.Namespace
			case "metadata.uid":
				v = string(r.pod.UID)
			case "spec.nodeName":
				v = r.pod.Spec.NodeName
			case "spec.serviceAccountName":
				v = r.pod.Spec.ServiceAccountName
			case "status.podIP", "status.hostIP":
				v = PodIP
			default:
				return nil, fmt.Errorf("env %s: fieldRef %q is not supported by the kubetest agent", ev.Name, f.FieldPath)
			}
		}
		if _, ok := vars[ev.Name]; !ok {
			order = append(order, ev.Name)
		}
		vars[ev.Name] = mapPath(v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

// report writes the pod's status as the agent knows it through
// UpdateStatus; a pod that is gone (or replaced under the same name) is
// left alone.
func (r *podRun) report() {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	if r.ctx.Err() != nil && !errors.Is(context.Cause(r.ctx), errDeadline) {
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
				Name: st.name, Image: st.image, ImageID: "kubetest://" + st.image,
				ContainerID: st.id, RestartCount: st.restarts, State: *st.state.DeepCopy(),
			}
			if t := cs.State.Terminated; t != nil && len(t.Message) > budget {
				t.Message = t.Message[:budget]
			}
			running := cs.State.Running != nil
			cs.Started = &running
			cs.Ready = running && !isInit || isInit && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
			out = append(out, cs)
		}
		return out
	}
	s.InitContainerStatuses = statuses(r.initSt, true)
	s.ContainerStatuses = statuses(r.mainSt, false)
	ready := r.phase == corev1.PodPending || r.phase == corev1.PodRunning
	for _, cs := range s.ContainerStatuses {
		ready = ready && cs.Ready
	}
	if len(s.ContainerStatuses) > 0 && ready && r.phase == corev1.PodPending {
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
