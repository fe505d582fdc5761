package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/procutil"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// Defaults for zero PodOptions fields.
const (
	DefaultPollInterval   = 2 * time.Second
	DefaultMaxLogBytes    = 64 << 10
	DefaultCleanupTimeout = 2 * time.Minute
)

// finalReadTimeout bounds each read (the last poll, a node, a log) that
// completes a report once observation ended, even when ctx is done.
const finalReadTimeout = 15 * time.Second

// PodOptions configures a PodBackend.
type PodOptions struct {
	// Namespace holds every check's ConfigMap and pods.
	Namespace string
	// SignetImage is the digest-pinned image holding the static signet
	// binary at /signet; its init container installs `signet exec`.
	SignetImage string
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// PollInterval is how often a check's pods are looked at while
	// observed when nothing changed (every change is looked at at once).
	PollInterval time.Duration
	// MaxLogBytes bounds each participant's kept log tail.
	MaxLogBytes int
	// CleanupTimeout bounds how long Cleanup waits for the objects to go.
	CleanupTimeout time.Duration
	// NodeUIDs, when set, answers a node's UID from a cache (the Fleet's,
	// Fleet.CachedNodeUID); when it does not know the node, or is nil, the
	// node is read from the API server.
	NodeUIDs func(name string) (uid string, ok bool)
}

// PodBackend is the `pod` backend (DESIGN §7): one pod per participant,
// pinned to its node, running the check through `signet exec` from a
// run-owned immutable ConfigMap holding the verified script. It never
// recreates a pod: a pod deleted or replaced behind its back is reported as
// that participant's Error. Pods and ConfigMap carry the run and check
// labels and no owner reference; Cleanup deletes them explicitly.
//
// Observation watches the check's pods (a client-go informer over its
// labels: one list and one watch per check) and looks again at every
// change and every PollInterval. Logs come from pods/log, stdout and
// stderr interleaved as the kubelet keeps them, in ParticipantReport.Stdout.
type PodBackend struct {
	client kubernetes.Interface
	o      PodOptions
	log    *slog.Logger
}

var _ backend.Backend = (*PodBackend)(nil)

// NewPodBackend returns the pod backend talking to client.
func NewPodBackend(client kubernetes.Interface, o PodOptions) *PodBackend {
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.MaxLogBytes <= 0 {
		o.MaxLogBytes = DefaultMaxLogBytes
	}
	if o.CleanupTimeout <= 0 {
		o.CleanupTimeout = DefaultCleanupTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &PodBackend{client: client, o: o, log: log}
}

// Describe returns "configmap/NAME" and "pod/NAME" for every object Run
// creates, and the digest of their canonical JSON as sent to the API
// server.
func (b *PodBackend) Describe(c *backend.CheckRun) ([]string, specs.Digest, error) {
	r, err := render(c, b.o.Namespace, b.o.SignetImage)
	if err != nil {
		return nil, "", err
	}
	d, err := r.digest()
	if err != nil {
		return nil, "", err
	}
	return r.names(), d, nil
}

// Run creates the check's ConfigMap, then its pods, and observes them until
// every pod is terminal, c.Deadline passes, or ctx is done. A create that
// fails (an object already there included: Run never adopts) returns the
// error at once, leaving what was created for Cleanup.
func (b *PodBackend) Run(ctx context.Context, c *backend.CheckRun) (*backend.CheckReport, error) {
	r, err := render(c, b.o.Namespace, b.o.SignetImage)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	cms := b.client.CoreV1().ConfigMaps(b.o.Namespace)
	if _, err := cms.Create(ctx, r.ConfigMap, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("pod backend: create configmap %s/%s: %w", b.o.Namespace, r.ConfigMap.Name, err)
	}
	ws := make([]*watched, len(r.Pods))
	for i, p := range r.Pods {
		got, err := b.client.CoreV1().Pods(b.o.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("pod backend: create pod %s/%s: %w", b.o.Namespace, p.Name, err)
		}
		ws[i] = &watched{name: p.Name, uid: got.UID, want: &p.Spec}
		// The pod as admitted: a mutating webhook may have changed what runs
		// (issue 21, finding 5). Such a pod's result is never read.
		if d := podSpecDiff(&p.Spec, &got.Spec); len(d) > 0 {
			ws[i].lost = fmt.Sprintf("pod %s (uid %s) as admitted differs from the rendered pod: %s", p.Name, got.UID, strings.Join(d, "; "))
			b.log.Warn("check pod changed at admission; its result will not be read", "run", c.Run, "check", c.Check.Name, "pod", p.Name, "diff", strings.Join(d, "; "))
		}
	}
	b.log.Info("check pods created", "run", c.Run, "check", c.Check.Name, "pods", len(r.Pods))
	return b.observe(ctx, c, ws, started), nil
}

// Adopt finds the pods of a check whose intent was written before a
// restart and observes them as Run does; it never creates anything. found
// is false when no pod of the check exists (the ConfigMap alone proves
// nothing ran). A pod is taken as the one signet created when it carries
// the check's labels and nonce, was created no earlier than the intent
// (c.IntentAt) and its containers and volumes are the rendered ones
// (podSpecDiff); any other is that participant's Error, and a missing one
// is reported as deleted behind signet's back.
func (b *PodBackend) Adopt(ctx context.Context, c *backend.CheckRun) (*backend.CheckReport, bool, error) {
	if len(c.Participants) == 0 {
		return nil, false, errors.New("pod backend: no participants")
	}
	r, err := render(c, b.o.Namespace, b.o.SignetImage)
	if err != nil {
		return nil, false, err
	}
	ws := make([]*watched, len(c.Participants))
	var earliest time.Time
	found := false
	for i := range c.Participants {
		name := podName(c.Run, c.Index, i)
		ws[i] = &watched{name: name, want: &r.Pods[i].Spec}
		p, err := b.client.CoreV1().Pods(b.o.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			ws[i].lost = "pod deleted behind signet's back: pod " + name + " is gone"
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("pod backend: adopt: %w", err)
		}
		found = true
		if !ownPod(c, i, p) {
			ws[i].lost = fmt.Sprintf("pod deleted behind signet's back: pod %s (uid %s) does not carry this check's labels and nonce", name, p.UID)
			continue
		}
		// Labels and nonce are not secret: the pod must also have been
		// created after the intent and be the pod signet renders.
		why := createdBeforeIntent(p, c.IntentAt)
		if d := podSpecDiff(&r.Pods[i].Spec, &p.Spec); why == "" && len(d) > 0 {
			why = "differs from the rendered pod: " + strings.Join(d, "; ")
		}
		if why != "" {
			ws[i].lost = fmt.Sprintf("pod %s (uid %s) is not the pod signet created: %s", name, p.UID, why)
			continue
		}
		ws[i].uid = p.UID
		if t := p.CreationTimestamp.Time; earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	if !found {
		return nil, false, nil
	}
	return b.observe(ctx, c, ws, earliest), true, nil
}

// ownPod reports whether p carries check c's labels for participant i and
// its nonce.
func ownPod(c *backend.CheckRun, i int, p *corev1.Pod) bool {
	for k, v := range objectLabels(c) {
		if p.Labels[k] != v {
			return false
		}
	}
	if p.Labels[ParticipantLabel] != strconv.Itoa(i) {
		return false
	}
	for _, ctr := range p.Spec.Containers {
		if ctr.Name != checkContainerName {
			continue
		}
		for _, e := range ctr.Env {
			if e.Name == specs.EnvNonce {
				return e.Value == c.Nonce
			}
		}
	}
	return false
}

// watched is what observe knows of one participant's pod.
type watched struct {
	name string
	uid  types.UID // the UID signet created (or adopted)
	// want is the rendered spec the pod must keep on every observation.
	want *corev1.PodSpec
	pod  *corev1.Pod
	// lost says why the pod is no longer the one signet created.
	lost string
	// nodeUIDs are the UIDs read for the pod's node, first and last.
	nodeUIDs []string
}

func (w *watched) terminal() bool {
	return w.lost != "" || (w.pod != nil && (w.pod.Status.Phase == corev1.PodSucceeded || w.pod.Status.Phase == corev1.PodFailed))
}

// observe polls the pods ws of c until each is terminal or lost,
// c.Deadline passes, or ctx is done, then builds the report.
func (b *PodBackend) observe(ctx context.Context, c *backend.CheckRun, ws []*watched, started time.Time) *backend.CheckReport {
	deadline := time.NewTimer(time.Until(c.Deadline))
	defer deadline.Stop()
	tick := time.NewTicker(b.o.PollInterval)
	defer tick.Stop()
	pw := b.watchPods(ctx, checkSelector(c))
	defer pw.stop()
	var deadlinePassed, canceled, waiting bool
	for {
		if err := b.poll(ctx, c, ws, pw); err != nil && ctx.Err() == nil {
			b.log.Warn("listing check pods failed; retrying", "run", c.Run, "check", c.Check.Name, "error", err)
		}
		if gated := gatedByKueue(ws); gated != waiting {
			waiting = gated
			if gated {
				b.log.Info("check waiting for capacity: its queue has not admitted the pod group yet",
					"run", c.Run, "check", c.Check.Name, "queue", workload(c).Queue)
			} else {
				b.log.Info("check admitted by its queue", "run", c.Run, "check", c.Check.Name, "queue", workload(c).Queue)
			}
		}
		all := true
		for _, w := range ws {
			all = all && w.terminal()
		}
		if all {
			break
		}
		select {
		case <-pw.changed:
			continue
		case <-tick.C:
			continue
		case <-deadline.C:
			deadlinePassed = true
		case <-ctx.Done():
			canceled = true
		}
		break
	}
	// The reads that complete the report happen even when ctx is done,
	// each bounded by finalReadTimeout.
	rctx := context.WithoutCancel(ctx)
	if deadlinePassed || canceled {
		// One last look: a pod may have ended since the last poll.
		pctx, cancel := context.WithTimeout(rctx, finalReadTimeout)
		_ = b.poll(pctx, c, ws, nil)
		cancel()
	}
	rep := &backend.CheckReport{StartedAt: started}
	for i, w := range ws {
		rep.Participants = append(rep.Participants, b.participantReport(rctx, c, i, w, deadlinePassed, canceled))
	}
	rep.EndedAt = time.Now()
	return rep
}

// gatedByKueue reports whether a participant's pod, not terminal, still
// carries one of Kueue's scheduling gates: the check waits for capacity
// (quota or a topology domain), it has not failed.
func gatedByKueue(ws []*watched) bool {
	for _, w := range ws {
		if !w.terminal() && w.pod != nil && kueueGate(w.pod) != "" {
			return true
		}
	}
	return false
}

// kueueGate returns the first of Kueue's scheduling gates on p, or "".
func kueueGate(p *corev1.Pod) string {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == KueueAdmissionGate || g.Name == KueueTopologyGate {
			return g.Name
		}
	}
	return ""
}

// kueueTerminationTarget is the condition Kueue's pod integration sets on
// each pod of a group it stops (preemption, eviction), with the reason and
// message, just before deleting the pod.
const kueueTerminationTarget corev1.PodConditionType = "TerminationTarget"

// kueueStopped returns Kueue's reason for stopping p ("WorkloadEvicted:
// Preempted to accommodate …"), or "" when Kueue did not stop it.
func kueueStopped(p *corev1.Pod) string {
	for _, cond := range p.Status.Conditions {
		if cond.Type == kueueTerminationTarget && cond.Status == corev1.ConditionTrue {
			return strings.TrimSpace(cond.Reason + ": " + cond.Message)
		}
	}
	return ""
}

// poll reads the check's pods — from the watch pw once it has listed
// them, else by listing — and updates every participant not yet terminal:
// a pod missing, replaced (another UID) or being deleted is lost. A pod the
// watch does not show is looked up by name before it is called gone.
func (b *PodBackend) poll(ctx context.Context, c *backend.CheckRun, ws []*watched, pw *podWatch) error {
	pods := b.client.CoreV1().Pods(b.o.Namespace)
	items, ok := pw.pods()
	if !ok {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: checkSelector(c)})
		if err != nil {
			return err
		}
		items = list.Items
	}
	byName := map[string]*corev1.Pod{}
	for i := range items {
		byName[items[i].Name] = &items[i]
	}
	for _, w := range ws {
		if w.terminal() {
			continue
		}
		p := byName[w.name]
		if p == nil {
			// Not listed: gone, or its labels changed. Look it up by name.
			got, err := pods.Get(ctx, w.name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				w.lost = "pod deleted behind signet's back: pod " + w.name + " is gone"
				continue
			case err != nil:
				return err
			}
			p = got
		}
		switch {
		case p.UID != w.uid:
			w.lost = fmt.Sprintf("pod deleted behind signet's back: pod %s was replaced (uid %s, signet's was %s)", w.name, p.UID, w.uid)
			continue
		case p.DeletionTimestamp != nil:
			w.pod = p
			w.lost = "pod deleted behind signet's back: pod " + w.name + " is being deleted"
			if why := kueueStopped(p); why != "" {
				// Kueue stops a pod group it evicts (preemption among
				// them) by deleting its pods; signet never recreates them.
				w.lost = "pod " + w.name + " stopped by Kueue: " + why
			}
			continue
		}
		// The pod as observed now: a container's image can be changed on
		// a live pod (issue 21, finding 5).
		if d := podSpecDiff(w.want, &p.Spec); len(d) > 0 {
			w.pod = p
			w.lost = fmt.Sprintf("pod %s (uid %s) as observed differs from the rendered pod: %s", w.name, p.UID, strings.Join(d, "; "))
			continue
		}
		if p.Spec.NodeName != "" && len(w.nodeUIDs) == 0 {
			w.nodeUIDs = append(w.nodeUIDs, b.nodeUID(ctx, p.Spec.NodeName))
		}
		w.pod = p
	}
	return nil
}

// nodeUID returns the UID of node name, from the cache (NodeUIDs) when it
// knows the node, or "" when it cannot be read.
func (b *PodBackend) nodeUID(ctx context.Context, name string) string {
	if b.o.NodeUIDs != nil {
		if uid, ok := b.o.NodeUIDs(name); ok {
			return uid
		}
	}
	ctx, cancel := context.WithTimeout(ctx, finalReadTimeout)
	defer cancel()
	n, err := b.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return string(n.UID)
}

// participantReport turns what was observed of participant i into its
// report: identity (pod UID, node name, node UID read when the pod was
// first seen bound and again now; a UID other than the admitted one is
// reported), termination, result and log tail.
func (b *PodBackend) participantReport(ctx context.Context, c *backend.CheckRun, i int, w *watched, deadlinePassed, canceled bool) backend.ParticipantReport {
	part := c.Participants[i]
	pr := backend.ParticipantReport{Node: part.Node}
	var notes []string
	p := w.pod
	if p == nil {
		pr.Termination.Reason = withNote(w.lost, "pod "+w.name+" was never observed")
		if deadlinePassed && w.lost == "" {
			pr.Termination.DeadlineExceeded = true
		}
		if canceled && w.lost == "" {
			pr.Termination.Canceled = true
		}
		return pr
	}

	pr.Identity = evidence.Identity{Workload: "pod:" + p.Namespace + "/" + p.Name + "@" + string(p.UID), Node: p.Spec.NodeName}
	if p.Spec.NodeName != "" {
		if w.lost == "" || len(w.nodeUIDs) == 0 {
			w.nodeUIDs = append(w.nodeUIDs, b.nodeUID(ctx, p.Spec.NodeName))
		}
		pr.Identity.NodeUID = w.nodeUIDs[0]
		for _, u := range w.nodeUIDs {
			if u != part.UID {
				pr.Identity.NodeUID = u
				if u == "" {
					notes = append(notes, "node "+p.Spec.NodeName+" could not be read")
				} else {
					notes = append(notes, fmt.Sprintf("node %s has uid %s, admitted uid %s", p.Spec.NodeName, u, part.UID))
				}
				break
			}
		}
		if p.Spec.NodeName != part.Node {
			notes = append(notes, fmt.Sprintf("pod ran on node %s, not on participant %s", p.Spec.NodeName, part.Node))
		}
	}

	term, result, more := podTermination(p)
	notes = append(notes, more...)
	pr.Result = result
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	// What ran, as the container runtime reports it, must be the pinned
	// images (issue 21, finding 5).
	images, bad := podImages(p, w.want)
	pr.Identity.Images = images
	lost := w.lost
	if lost == "" && len(bad) > 0 {
		lost = "pod " + p.Name + " did not run the pinned images: " + strings.Join(bad, "; ")
	}
	switch {
	case lost != "":
		// Whatever it did, it is no longer the workload signet created and
		// observed to its end.
		term.Exited, term.ExitCode, term.Signal = false, 0, ""
		term.DeadlineExceeded = false
		pr.Result = nil
		notes = append([]string{lost}, notes...)
	case !terminal && deadlinePassed && kueueGate(p) != "":
		term.DeadlineExceeded = true
		// The cause leads; the pod's own notes (unscheduled: gated) follow.
		notes = append([]string{fmt.Sprintf("waiting for capacity: queue %q had not admitted pod %s (scheduling gate %s) at the check deadline %s",
			workload(c).Queue, p.Name, kueueGate(p), c.Deadline.UTC().Format(time.RFC3339))}, notes...)
	case !terminal && deadlinePassed:
		term.DeadlineExceeded = true
		notes = append(notes, fmt.Sprintf("pod %s still %s at the check deadline %s", p.Name, p.Status.Phase, c.Deadline.UTC().Format(time.RFC3339)))
	case !terminal && canceled:
		term.Canceled = true
		notes = append(notes, fmt.Sprintf("observation canceled with pod %s %s", p.Name, p.Status.Phase))
	}

	if term.Started {
		out, err := b.logs(ctx, p.Name)
		if err != nil {
			notes = append(notes, "logs not read: "+err.Error())
		}
		pr.Stdout = out
	}
	term.Reason = strings.Join(notes, "; ")
	pr.Termination = term
	return pr
}

// podTermination reads the check container's state: started or not, how it
// ended and its result, with notes on the pod's phase and the install
// container.
func podTermination(p *corev1.Pod) (specs.Termination, []byte, []string) {
	var notes []string
	var term specs.Termination
	var result []byte
	if p.Status.Reason == "DeadlineExceeded" {
		term.DeadlineExceeded = true
	}
	if p.Status.Reason != "" || p.Status.Message != "" {
		notes = append(notes, strings.TrimSpace("pod "+string(p.Status.Phase)+": "+p.Status.Reason+" "+p.Status.Message))
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			notes = append(notes, fmt.Sprintf("init container %s exited with code %d: %s", cs.Name, t.ExitCode, strings.TrimSpace(t.Reason+" "+t.Message)))
		}
		if wt := cs.State.Waiting; wt != nil && wt.Reason != "" && wt.Reason != "PodInitializing" {
			notes = append(notes, fmt.Sprintf("init container %s waiting: %s", cs.Name, strings.TrimSpace(wt.Reason+" "+wt.Message)))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != checkContainerName {
			continue
		}
		switch {
		case cs.State.Terminated != nil:
			t, r, n := resultFromTermination(cs.State.Terminated)
			t.DeadlineExceeded = term.DeadlineExceeded
			term, result = t, r
			notes = append(notes, n...)
		case cs.State.Running != nil:
			term.Started = true
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "PodInitializing":
			notes = append(notes, "container check waiting: "+strings.TrimSpace(cs.State.Waiting.Reason+" "+cs.State.Waiting.Message))
		}
	}
	if p.Status.Phase == corev1.PodPending && p.Spec.NodeName == "" {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				notes = append(notes, "unscheduled: "+strings.TrimSpace(cond.Reason+" "+cond.Message))
			}
		}
	}
	return term, result, notes
}

// resultFromTermination maps a terminated check container to a
// Termination and result, as the local backend maps a process: exit code
// 128+n (how signet exec and container runtimes report signal n) is the
// signal, anything else an exit with that code. The termination message is
// the result (nil when empty); one starting with RefusalPrefix is signet
// exec saying why there is none, reported as ResultRefused.
func resultFromTermination(t *corev1.ContainerStateTerminated) (specs.Termination, []byte, []string) {
	term := specs.Termination{Started: true}
	var notes []string
	code := int(t.ExitCode)
	if code > 128 && code <= 128+64 {
		sig := syscall.Signal(code - 128)
		term.Signal = unix.SignalName(sig)
		if term.Signal == "" {
			term.Signal = "signal " + strconv.Itoa(int(sig))
		}
		notes = append(notes, fmt.Sprintf("container exit code %d (128+%s)", code, term.Signal))
	} else {
		term.Exited, term.ExitCode = true, code
		notes = append(notes, fmt.Sprintf("exited with code %d", code))
	}
	if t.Reason != "" && t.Reason != "Completed" && t.Reason != "Error" {
		notes = append(notes, "container "+t.Reason)
	}
	var result []byte
	switch msg := t.Message; {
	case msg == "":
	case strings.HasPrefix(msg, RefusalPrefix):
		term.ResultRefused = strings.TrimSpace(msg)
	default:
		result = []byte(msg)
	}
	return term, result, notes
}

// logs reads the tail of the check container's log, at most MaxLogBytes.
func (b *PodBackend) logs(ctx context.Context, pod string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, finalReadTimeout)
	defer cancel()
	return logTail(ctx, b.client, b.o.Namespace, pod, b.o.MaxLogBytes)
}

// logTail reads the end of the check container's log of pod ns/pod and
// keeps its last keep bytes. The kubelet can only be asked for the last
// lines, and for at most so many bytes from the first of them: it is asked
// for the last max(100, keep/40) lines and at most logReadFactor×keep
// bytes, and when that many came (the lines longer than expected, the end
// of the log not reached) again for half as many lines, down to one. What
// is kept is thus the end of the log however long it or its lines grew (a
// check prints its summary last), and a chatty check cannot make the
// reconciler read more than logReadFactor×keep bytes a request. Only when
// the last line alone is longer than that is what is kept not its end.
func logTail(ctx context.Context, client kubernetes.Interface, ns, pod string, keep int) ([]byte, error) {
	limit := int64(logReadFactor * keep)
	for lines := int64(max(100, keep/40)); ; lines = max(1, lines/2) {
		rc, err := client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{
			Container: checkContainerName, LimitBytes: &limit, TailLines: &lines,
		}).Stream(ctx)
		if err != nil {
			return nil, err
		}
		tail := procutil.NewTail(keep)
		n, err := io.Copy(tail, rc)
		rc.Close()
		if err != nil || n < limit || lines == 1 {
			return tail.Bytes(), err
		}
	}
}

// logReadFactor bounds one log read at this many times the bytes kept.
const logReadFactor = 8

// Cleanup deletes the check's pods and ConfigMap with foreground
// propagation and waits, at most CleanupTimeout, until they are gone. What
// is already gone is not an error.
func (b *PodBackend) Cleanup(ctx context.Context, c *backend.CheckRun) error {
	ctx, cancel := context.WithTimeout(ctx, b.o.CleanupTimeout)
	defer cancel()
	fg := metav1.DeletePropagationForeground
	del := metav1.DeleteOptions{PropagationPolicy: &fg}
	pods := b.client.CoreV1().Pods(b.o.Namespace)
	cms := b.client.CoreV1().ConfigMaps(b.o.Namespace)
	var errs []error
	for i := range c.Participants {
		if err := pods.Delete(ctx, podName(c.Run, c.Index, i), del); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := cms.Delete(ctx, checkBaseName(c.Run, c.Index), del); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("pod backend: cleanup: %w", errors.Join(errs...))
	}
	tick := time.NewTicker(b.o.PollInterval)
	defer tick.Stop()
	stillThere := func(err error, left []string) error {
		if err != nil {
			return fmt.Errorf("pod backend: cleanup: %w", err)
		}
		return fmt.Errorf("pod backend: cleanup: still present after %v: %s", b.o.CleanupTimeout, strings.Join(left, ", "))
	}
	for {
		left, rv, err := b.remaining(ctx, c)
		if err == nil && len(left) == 0 {
			return nil
		}
		// Pods left: follow their deletion on a watch from the list's
		// resourceVersion (every change after the list, in order), so
		// that Cleanup goes on when the last one goes rather than at
		// the next poll, with one list instead of one a poll.
		if err == nil && (!slices.ContainsFunc(left, isPod) || b.podsDeleted(ctx, c, rv, left)) {
			if !slices.ContainsFunc(left, isConfigMap) {
				return nil
			}
			// The ConfigMap (foreground deletion: the garbage
			// collector removes it) is read by name until it is gone.
			for {
				select {
				case <-ctx.Done():
					return stillThere(nil, []string{"configmap/" + checkBaseName(c.Run, c.Index)})
				case <-tick.C:
				}
				_, err := b.client.CoreV1().ConfigMaps(b.o.Namespace).Get(ctx, checkBaseName(c.Run, c.Index), metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return stillThere(err, left)
		case <-tick.C:
		}
	}
}

func isPod(obj string) bool { return strings.HasPrefix(obj, "pod/") }

func isConfigMap(obj string) bool { return strings.HasPrefix(obj, "configmap/") }

// podsDeleted watches the check's pods from resourceVersion rv, at which
// the pods named in left ("pod/NAME"; other entries are skipped) were
// present, until every one of them (and any added since) is deleted:
// true. It returns false when the watch cannot start or ends first (an
// expired resourceVersion, a closed connection, ctx done); the caller
// lists again.
func (b *PodBackend) podsDeleted(ctx context.Context, c *backend.CheckRun, rv string, left []string) bool {
	w, err := b.client.CoreV1().Pods(b.o.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: checkSelector(c), ResourceVersion: rv})
	return err == nil && deletedOnWatch(w, podsIn(left))
}

// podsIn is the set of pod names among Cleanup's "kind/NAME" entries.
func podsIn(left []string) map[string]bool {
	pods := map[string]bool{}
	for _, o := range left {
		if name, ok := strings.CutPrefix(o, "pod/"); ok {
			pods[name] = true
		}
	}
	return pods
}

// deletedOnWatch reads w until every object named in present (and any
// added under the watch's selector since) is deleted: true. It returns
// false when the watch reports an error or ends first. It stops w.
func deletedOnWatch(w watch.Interface, present map[string]bool) bool {
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return false
		}
		obj, err := meta.Accessor(ev.Object)
		if err != nil {
			return false
		}
		switch ev.Type {
		case watch.Deleted:
			delete(present, obj.GetName())
		case watch.Added:
			present[obj.GetName()] = true
		}
		if len(present) == 0 {
			return true
		}
	}
	return false
}

// remaining lists the check's objects still present, and the
// resourceVersion of the pod list.
func (b *PodBackend) remaining(ctx context.Context, c *backend.CheckRun) ([]string, string, error) {
	var left []string
	pl, err := b.client.CoreV1().Pods(b.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: checkSelector(c)})
	if err != nil {
		return nil, "", err
	}
	for _, p := range pl.Items {
		left = append(left, "pod/"+p.Name)
	}
	_, err = b.client.CoreV1().ConfigMaps(b.o.Namespace).Get(ctx, checkBaseName(c.Run, c.Index), metav1.GetOptions{})
	switch {
	case err == nil:
		left = append(left, "configmap/"+checkBaseName(c.Run, c.Index))
	case !apierrors.IsNotFound(err):
		return nil, "", err
	}
	return left, pl.ResourceVersion, nil
}

func withNote(a, b string) string {
	if a == "" {
		return b
	}
	return a
}
