package kubetest

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

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
	// WrongImage runs the pod normally but reports, for each of its
	// containers, an image ID whose digest is not the pinned one: the
	// runtime ran other content than the reference names (a registry or
	// mirror serving other bytes, a poisoned image cache).
	WrongImage
)

func (m Misbehaviour) String() string {
	switch m {
	case None:
		return "None"
	case NeverTerminate:
		return "NeverTerminate"
	case LosePod:
		return "LosePod"
	case WrongImage:
		return "WrongImage"
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
	// Entrypoints maps an image reference (as in Images) to that image's
	// entrypoint (the image config's Entrypoint): a container of the image
	// without a command runs the entrypoint with the container's args, as a
	// container runtime does. A container without a command whose image
	// has no entrypoint here runs the idle process (see Agent).
	Entrypoints map[string][]string
	// Chroot runs each container whose image has a root directory in
	// Images as a runtime would, instead of rewriting paths: in new user
	// and mount namespaces (util-linux unshare, root mapped to the test's
	// user), chrooted into the image root, with every volumeMount
	// bind-mounted at its mountPath and the host's /proc and /dev at /proc
	// and /dev. A path a program reads from a file (a config naming
	// /etc/app/key) then reaches the volume, which rewriting arguments
	// cannot do. Mount points are created as empty directories in the
	// image's root directory. Command, args, env and workingDir are not
	// rewritten; the process starts in "/" (chroot's default). readOnly
	// mounts are not made read-only. The network is still the host's.
	Chroot bool
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
//     missing the pod stays Pending (waiting ContainerCreating). A projected
//     volume is such a directory of its sources: configMap, secret,
//     downwardAPI (fieldRef metadata.name, metadata.namespace, metadata.uid,
//     spec.nodeName, spec.serviceAccountName) and serviceAccountToken, a
//     token of the pod's ServiceAccount from the TokenRequest API bound to
//     the pod (its audience and expirationSeconds, default 1 h), as the
//     kubelet's projected service-account token — written once, never
//     rotated. A hostPath volume is the host path itself. Any other volume type is not
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
//     CreateContainerConfigError (the pod stays Pending). A pod with a
//     serviceAccountToken volume source also gets KUBERNETES_SERVICE_HOST
//     and KUBERNETES_SERVICE_PORT, the API server's loopback address and
//     port: they stand for the kubernetes Service's cluster IP, which
//     kube-proxy would forward there, so that client-go's in-cluster
//     configuration (with the token and ca.crt at
//     /var/run/secrets/kubernetes.io/serviceaccount, see Chroot) reaches
//     the API server as the pod's ServiceAccount. The kubelet sets them in
//     every pod; the agent only where they can be used.
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
//     Conditions Initialized, ContainersReady and Ready follow. A running
//     container without a readinessProbe is ready; one with an httpGet
//     readinessProbe is ready once a GET of http://PodIP:port/path (a
//     named port is looked up in the container's ports) answers 200–399,
//     and not ready after failureThreshold (default 3) failures in a row:
//     the first probe at initialDelaySeconds, then every periodSeconds but
//     at most 1 s apart (the kubelet's default is 10 s; tests need not
//     wait), each with timeoutSeconds (default 1 s). Other probe handlers
//     leave the container not ready; liveness and startup probes do not
//     run.
//   - Deletion: once a pod has a deletionTimestamp, its process groups get
//     TERM then KILL after min(grace, 2 s), the pod is reported Failed (as
//     kubelets from 1.27 put a pod they delete into a terminal phase), and
//     the agent deletes the pod with
//     grace period 0 (the kubelet's confirmation), so that foreground
//     deletion and garbage collection complete. A pod that disappears
//     without that is killed at once.
//
// It does not simulate images (nothing is pulled, the image is a directory),
// isolation (no cgroups, resource limits or users; without Chroot no
// namespaces either: processes run as the test's user on the host network
// and filesystem), liveness and startup probes,
// lifecycle hooks, sidecar (restartPolicy Always) init containers,
// ephemeral containers, node status heartbeats, eviction, or the kubelet's
// API beyond pods/log (exec and attach through the API server do not work).
// pods/log through the API server serves Logs of a pod that still exists
// (see kubeletAPI).
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
	e.kubelet.add(a)
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
	a.e.kubelet.remove(a)
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
