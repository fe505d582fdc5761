package kube

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// operatorDeadlineSkew is how much earlier than signet's own deadline the
// launcher Job's activeDeadlineSeconds can end the launcher: Kubernetes
// stores the Job's start time with second precision.
const operatorDeadlineSkew = time.Second

// mpiRetryInterval bounds the wait after a look that failed to read the
// API server: its next try does not wait for a change or a PollInterval.
const mpiRetryInterval = time.Second

// observation is what one poll saw.
type observation struct {
	// live is true when the poll read the API server, false when it read
	// the watch's cache.
	live     bool
	launcher *corev1.Pod // nil while none exists
	workers  []corev1.Pod
	// foreign lists pods labelled as the job's that it does not control.
	foreign []string
	failed  string // the MPIJob's Failed condition, when set
	gone    string // why the job counts as gone behind signet's back
	// suspended is the MPIJob's spec.runPolicy.suspend: Kueue holds a job
	// of a queue suspended until it admits it, and suspends it again to
	// evict it.
	suspended bool
	// held, when set, is Kueue's part in how the observation ended
	// (waiting for capacity, or stopped by Kueue): it leads the reason,
	// before any coverage problem it caused.
	held string
}

// observe looks at the job until the launcher is terminal, c.Deadline,
// ctx's end, or the job (UID uid) or its launcher disappears, and builds
// the report. It watches the MPIJob and its pods (mpiWatch) and looks
// again at every change they report and at least every PollInterval
// (issue 19).
//
// A look reads the watch's cache once both informers have listed; a cache
// may lag the API server, so a look that would end the observation (the
// launcher terminal, the job or a pod gone, replaced or forged, the job
// suspended again or failed, the deadline passed) is never the last one:
// it is looked at again on the API server (a live poll: the MPIJob, its
// pods and every launcher's Job read afresh), and only what that live
// look shows ends the observation and decides the verdict. A cache that
// shows a launcher terminal with a Pass while the API server does not can
// therefore not yield a Pass (TestMPIJobOnAPIServer/stale_cache).
func (b *MPIJobBackend) observe(ctx context.Context, c *backend.CheckRun, uid string, started time.Time, log *slog.Logger) *backend.CheckReport {
	name := MPIJobName(c.Run, c.Index)
	var last observation
	var seenLauncher bool
	// admitted: the job was seen unsuspended (its queue admitted it, or it
	// has none); waiting: it is suspended and has not been yet.
	var admitted, waiting bool
	queue := workload(c).Queue
	pins := map[string]types.UID{} // pod name → the UID first seen
	// The rendered templates every launcher and worker is compared with on
	// every poll (issue 21, finding 5). Run rendered c already, so this
	// fails only for a check Adopt cannot render: nothing is then bound.
	var tpls *mpiTemplates
	_, job, err := b.render(c)
	if err == nil {
		tpls, err = templatesOf(job, c.Check.GPUCount)
	}
	if err != nil {
		term := specs.Termination{Reason: "the MPIJob's templates cannot be rendered to compare its pods with: " + err.Error()}
		return b.report(ctx, c, started, last, tpls, term, nil, log)
	}
	w := b.watch(ctx, name)
	defer w.stop()
	// The first look waits for the watch's lists (the job was just
	// created or adopted: nothing is missed), else it reads the API server.
	w.waitSynced(ctx, mpiSyncTimeout)
	// chain keeps the launcher chain's verdict per Job UID across the
	// looks at the cache; a live look reads every Job again, and its
	// verdicts replace these.
	chain := map[types.UID]string{}
	// live: the next look reads the API server, to confirm an ending the
	// cache showed (or because the last live look failed).
	live := false
	for {
		// Past the deadline the operator's own activeDeadlineSeconds may
		// end or remove the launcher: what this poll sees is then the
		// deadline's doing. The operator's launcher Job counts its deadline
		// from a start time stored in whole seconds, so it can fire up to a
		// second before c.Deadline: that second counts as late too.
		late := !time.Now().Add(operatorDeadlineSkew).Before(c.Deadline)
		var ob observation
		var err error
		if live {
			fresh := map[types.UID]string{}
			ob, err = b.poll(ctx, c, name, uid, tpls, nil, fresh)
			if err == nil {
				chain = fresh
			}
		} else {
			ob, err = b.poll(ctx, c, name, uid, tpls, w, chain)
		}
		live = err != nil && live
		if err == nil && ob.gone == "" {
			ob.gone = pinned(pins, ob)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("mpijob poll failed", "err", err)
		case err == nil:
			if ob.launcher == nil && seenLauncher && ob.gone == "" {
				ob.gone = "launcher pod of MPIJob " + name + " disappeared behind signet's back"
			}
			if ob.gone != "" {
				if !ob.live {
					live = true
					continue
				}
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
				return b.report(ctx, c, started, last, tpls, term, nil, log)
			}
			if ob.suspended {
				if admitted || seenLauncher || len(ob.workers) > 0 || ob.launcher != nil {
					if !ob.live {
						live = true
						continue
					}
					// Suspended again once it ran (Kueue evicts a job by
					// suspending it; the operator then deletes its pods):
					// the check is stopped, never Pass, never rerun.
					if len(ob.workers) > 0 || ob.launcher != nil {
						last = ob
					}
					last.held = b.suspendedAgain(ctx, name, uid, queue)
					log.Warn("mpijob stopped", "reason", last.held)
					term, _, _ := launcherState(last.launcher)
					term.Exited, term.ExitCode, term.Signal = false, 0, ""
					term.Started = seenLauncher
					term.Reason = mpiJoinReasons(last.held, term.Reason)
					return b.report(ctx, c, started, last, tpls, term, nil, log)
				}
				if queue == "" {
					if !ob.live {
						live = true
						continue
					}
					ob.gone = "MPIJob " + name + " was suspended behind signet's back (spec.runPolicy.suspend true) and the check names no queue"
					log.Warn("mpijob gone", "reason", ob.gone)
					return b.report(ctx, c, started, last, tpls, specs.Termination{Reason: ob.gone}, nil, log)
				}
				if !waiting {
					log.Info("check waiting for capacity: its queue has not admitted the MPIJob yet", "queue", queue)
				}
				waiting = true
			} else {
				if waiting {
					log.Info("check admitted by its queue", "queue", queue)
				}
				waiting, admitted = false, true
			}
			if _, _, done := launcherState(ob.launcher); done && !ob.live {
				// The cache shows the launcher terminal: nothing of it is
				// kept, the API server's word decides.
				live = true
				continue
			}
			last = ob
			if ob.launcher != nil {
				seenLauncher = true
				if t, res, done := launcherState(ob.launcher); done {
					if late && !t.Exited {
						t.DeadlineExceeded = true
					}
					return b.report(ctx, c, started, last, tpls, t, res, log)
				}
			} else if ob.failed != "" {
				if !ob.live {
					live = true
					continue
				}
				term := specs.Termination{Reason: "MPIJob failed before its launcher ran: " + ob.failed}
				return b.report(ctx, c, started, last, tpls, term, nil, log)
			}
		}
		if ctx.Err() != nil {
			term, res, _ := launcherState(last.launcher)
			term.Canceled, term.Reason = true, mpiJoinReasons(term.Reason, "observation canceled before the launcher ended")
			return b.report(ctx, c, started, last, tpls, term, res, log)
		}
		if !time.Now().Before(c.Deadline) {
			if err == nil && !ob.live {
				// One last look on the API server: the launcher may
				// have ended where the cache does not show it yet.
				live = true
				continue
			}
			term, res, _ := launcherState(last.launcher)
			term.DeadlineExceeded = true
			term.Reason = mpiJoinReasons(term.Reason, "launcher not terminal at the check's deadline "+c.Deadline.UTC().Format(time.RFC3339))
			if waiting {
				last.held = fmt.Sprintf("waiting for capacity: queue %q had not admitted MPIJob %s (spec.runPolicy.suspend true) at the check deadline %s",
					queue, name, c.Deadline.UTC().Format(time.RFC3339))
				term.Reason = mpiJoinReasons(last.held, term.Reason)
			}
			return b.report(ctx, c, started, last, tpls, term, res, log)
		}
		wait := min(b.o.PollInterval, max(time.Until(c.Deadline), time.Millisecond))
		if err != nil {
			wait = min(wait, mpiRetryInterval)
		}
		select {
		case <-ctx.Done():
		case <-w.changed:
		case <-time.After(wait):
		}
	}
}

// pinned records the UID of every launcher and worker pod the first time it
// is seen and says why the job counts as gone when a pod of a known name now
// has another UID ("" when none has).
func pinned(pins map[string]types.UID, ob observation) string {
	pods := slices.Clone(ob.workers)
	if ob.launcher != nil {
		pods = append(pods, *ob.launcher)
	}
	for _, p := range pods {
		if was, ok := pins[p.Name]; ok && was != p.UID {
			return fmt.Sprintf("pod %s was replaced behind signet's back (uid %s, first seen as %s)", p.Name, p.UID, was)
		}
		pins[p.Name] = p.UID
	}
	return ""
}

// poll reads the MPIJob (which must still have UID uid), its launcher pod and
// its worker pods: from the watch w when it is not nil and has listed both
// (ob.live false), else from the API server (ob.live true). checked caches
// the launcher chain's verdict per Job UID for as long as the caller keeps
// it. Only pods whose controller chain leads to the MPIJob
// count (issue 21, finding 1): a worker controlled by the MPIJob, a
// launcher controlled by a batch/v1 Job that the MPIJob controls, each
// created no earlier than the intent. A pod that carries the job's labels
// and fails that is foreign: the job counts as gone, since someone else
// is writing pods in its name.
//
// Each pod that passes is also compared with its rendered template, the
// operator's own additions allowed (tpls.diff): one that differs counts as
// foreign too.
func (b *MPIJobBackend) poll(ctx context.Context, c *backend.CheckRun, name, uid string, tpls *mpiTemplates, w *mpiWatch, jobs map[types.UID]string) (observation, error) {
	job, items, cached := w.read()
	var err error
	if !cached {
		job, items, err = b.readLive(ctx, name)
	}
	ob := observation{live: !cached}
	switch {
	case err != nil:
		return ob, err
	case job == nil:
		ob.gone = "MPIJob " + name + " was deleted behind signet's back"
		return ob, nil
	case string(job.GetUID()) != uid:
		ob.gone = fmt.Sprintf("MPIJob %s was replaced behind signet's back (uid %s, created as %s)", name, job.GetUID(), uid)
		return ob, nil
	case job.GetDeletionTimestamp() != nil:
		ob.gone = "MPIJob " + name + " is being deleted behind signet's back"
		return ob, nil
	}
	ob.suspended, _, _ = unstructured.NestedBool(job.Object, "spec", "runPolicy", "suspend")
	conds, _, _ := unstructured.NestedSlice(job.Object, "status", "conditions")
	for _, cv := range conds {
		m, _ := cv.(map[string]any)
		if m["type"] == "Failed" && m["status"] == "True" {
			ob.failed = fmt.Sprintf("%v: %v", m["reason"], m["message"])
		}
	}
	var launchers []corev1.Pod
	for _, p := range items {
		var why string
		switch p.Labels[MPIJobRoleLabel] {
		case MPIRoleLauncher:
			if why, err = b.launcherChain(ctx, &p, types.UID(uid), jobs); err != nil {
				return ob, err
			}
		case MPIRoleWorker:
			why = controlledBy(&p, "MPIJob", types.UID(uid))
		default:
			continue
		}
		if why == "" {
			why = createdBeforeIntent(&p, c.IntentAt)
		}
		if why == "" {
			why = tpls.diff(&p, p.Labels[MPIJobRoleLabel])
		}
		switch {
		case why != "":
			ob.foreign = append(ob.foreign, fmt.Sprintf("pod %s (uid %s, role %s) %s", p.Name, p.UID, p.Labels[MPIJobRoleLabel], why))
		case p.Labels[MPIJobRoleLabel] == MPIRoleLauncher:
			launchers = append(launchers, p)
		default:
			ob.workers = append(ob.workers, p)
		}
	}
	if len(ob.foreign) > 0 {
		ob.gone = "pods labelled as MPIJob " + name + "'s that it does not control: " + strings.Join(ob.foreign, "; ")
		// A job deleted while this poll listed its pods takes its launcher
		// Job first: say that, the cause, rather than the orphans it
		// leaves for a moment. Either way the check is not a Pass. (A
		// look at the cache ends nothing: the live look that follows
		// reads it.)
		if !ob.live {
			return ob, nil
		}
		again, err := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			ob.gone = "MPIJob " + name + " was deleted behind signet's back"
		case err == nil && string(again.GetUID()) != uid:
			ob.gone = fmt.Sprintf("MPIJob %s was replaced behind signet's back (uid %s, created as %s)", name, again.GetUID(), uid)
		case err == nil && again.GetDeletionTimestamp() != nil:
			ob.gone = "MPIJob " + name + " is being deleted behind signet's back"
		}
		return ob, nil
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

// readLive reads MPIJob name (nil when it does not exist) and its pods from
// the API server, the MPIJob first.
func (b *MPIJobBackend) readLive(ctx context.Context, name string) (*unstructured.Unstructured, []corev1.Pod, error) {
	job, err := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil, nil
	case err != nil:
		return nil, nil, err
	}
	pods, err := b.client.CoreV1().Pods(b.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: mpiPodSelector(name)})
	if err != nil {
		return nil, nil, err
	}
	return job, pods.Items, nil
}

// launcherChain says why the launcher pod p is not the MPIJob's (uid):
// its controller must be a batch/v1 Job that exists with that UID and is
// itself controlled by the MPIJob. checked caches the verdict per Job UID
// (for one live poll, or across the looks at the watch's cache). "" when
// the chain holds. A Job that does not exist breaks the chain; one that
// could not be read (a canceled poll, an API error) is an error, not a
// verdict: the poll is retried, and a cancel that ended it is reported as
// the cancel it is.
func (b *MPIJobBackend) launcherChain(ctx context.Context, p *corev1.Pod, uid types.UID, checked map[types.UID]string) (string, error) {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != "batch/v1" {
		return controlledBy(p, "Job", ""), nil
	}
	if why, ok := checked[ref.UID]; ok {
		return why, nil
	}
	why := ""
	job, err := b.client.BatchV1().Jobs(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		why = fmt.Sprintf("names Job %s as its controller, which does not exist", ref.Name)
	case err != nil:
		// Not read is not forged: the poll fails and the next one (or
		// the cancel or deadline that ended this one) decides.
		return "", fmt.Errorf("reading Job %s, the controller of launcher pod %s: %w", ref.Name, p.Name, err)
	case job.UID != ref.UID:
		why = fmt.Sprintf("names Job %s uid %s as its controller; that Job has uid %s", ref.Name, ref.UID, job.UID)
	default:
		if w := controlledBy(job, "MPIJob", uid); w != "" {
			why = "is controlled by Job " + job.Name + ", which " + w
		}
	}
	checked[ref.UID] = why
	return why, nil
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
//
// The images every launcher and worker container ran are recorded in the
// participants' identities (a participant's worker's, then the launcher's)
// and checked against the pinned digests; a difference refuses the result
// as a coverage problem does.
func (b *MPIJobBackend) report(ctx context.Context, c *backend.CheckRun, started time.Time, ob observation, tpls *mpiTemplates, term specs.Termination, result []byte, log *slog.Logger) *backend.CheckReport {
	// The observation may have ended with ctx; what is left to read (nodes,
	// logs) is read under a short bound of its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ids, problems := b.coverage(rctx, c, ob.workers)
	if tpls != nil {
		var launcherImages []evidence.ContainerImage
		if ob.launcher != nil {
			imgs, bad := podImages(ob.launcher, tpls.launcher)
			launcherImages, problems = imgs, append(problems, bad...)
		}
		for _, w := range ob.workers {
			imgs, bad := podImages(&w, tpls.worker)
			problems = append(problems, bad...)
			for i := range ids {
				if ids[i].Workload == workerIdentity(&w) {
					ids[i].Images = append(ids[i].Images, imgs...)
				}
			}
		}
		for i := range ids {
			ids[i].Images = append(ids[i].Images, launcherImages...)
		}
	}
	if !term.Exited {
		result = nil
	}
	if len(problems) > 0 && !term.Canceled {
		why := "coverage: " + strings.Join(problems, "; ")
		if ob.held != "" {
			// Kueue's hold is the cause; the coverage it left is the
			// consequence.
			term.Reason = mpiJoinReasons(term.Reason, why)
		} else {
			term.Reason = mpiJoinReasons(why, term.Reason)
		}
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
	ctx, cancel := context.WithTimeout(ctx, finalReadTimeout)
	defer cancel()
	out, err := logTail(ctx, b.client, p.Namespace, p.Name, b.o.MaxLogBytes)
	if err != nil {
		log.Info("launcher log not read", "pod", p.Name, "err", err)
	}
	if len(out) > 0 {
		return out
	}
	return nil
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
