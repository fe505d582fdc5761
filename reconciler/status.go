package reconciler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// Status is the reconciler's view of every object and run, with
// Kubernetes-style conditions using fluxcd/pkg/apis/meta types and reasons.
type Status struct {
	Cluster    string             `json:"cluster"`
	Revision   string             `json:"revision,omitempty"`
	Conditions []metav1.Condition `json:"conditions"`
	Objects    []ObjectStatus     `json:"objects"`
	Runs       []RunStatus        `json:"runs"`
	Holds      map[string]string  `json:"holds,omitempty"`
	// LastPass is the last reconcile pass that ended; absent before the
	// first.
	LastPass *PassStatus `json:"lastPass,omitempty"`
	// Passes are the last passes that ended (at most RecentPasses), by
	// number: `reconcile --wait` finds its own pass there when later ones
	// ended before it looked.
	Passes []PassStatus `json:"passes,omitempty"`
	// Certified are the certifications the cluster's nodes carry now
	// (kubernetes.certifyTTL labels that are not expired and whose node
	// identity is unchanged), read from the cluster when /status is
	// asked; absent when no backend labels nodes.
	Certified []CertifiedNode `json:"certified,omitempty"`
	// CertifiedError says why a backend's certifications could not be
	// read (Certified then lacks that backend's nodes).
	CertifiedError string    `json:"certifiedError,omitempty"`
	UpdatedAt      time.Time `json:"updatedAt"`
}

// CertifiedNode is one node's certification label set: the profile and
// run that certified it and when the certification expires.
type CertifiedNode struct {
	Node    string    `json:"node"`
	Profile string    `json:"profile"`
	Run     string    `json:"run"`
	Until   time.Time `json:"until"`
}

// PassStatus is what one reconcile pass did. Passes are numbered from 1
// in the order they start; POST /reconcile answers the number of the
// first pass that starts after it (TriggerAnswer), which `signet
// reconcile --now --wait` waits for.
type PassStatus struct {
	Number     int64     `json:"number"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	Revision   string    `json:"revision,omitempty"`
	Noop       bool      `json:"noop,omitempty"`
	Admitted   []string  `json:"admitted,omitempty"`
	// Error is why the pass failed; empty when it succeeded.
	Error string `json:"error,omitempty"`
}

// TriggerAnswer is the body of POST /reconcile's 202: the pass that
// starts after the request (Pass) or a later one reflects it.
type TriggerAnswer struct {
	Pass int64 `json:"pass"`
}

// ObjectStatus is the status of one spec object.
type ObjectStatus struct {
	Kind       string             `json:"kind"`
	Name       string             `json:"name"`
	Digest     specs.Digest       `json:"digest"`
	Run        string             `json:"run,omitempty"`
	Conditions []metav1.Condition `json:"conditions"`
	// Standing is set for a standing certification that passed its gates.
	Standing *StandingStatus `json:"standing,omitempty"`
}

// RunStatus is the status of one run known to this reconciler.
type RunStatus struct {
	ID         string             `json:"id"`
	Phase      evidence.Phase     `json:"phase"`
	Verdict    specs.Verdict      `json:"verdict,omitempty"`
	Dir        string             `json:"dir"`
	Deadline   time.Time          `json:"deadline"`
	Nodes      []string           `json:"nodes"`
	Released   []string           `json:"released,omitempty"`
	Retained   []string           `json:"retained,omitempty"`
	Checks     []CheckStatus      `json:"checks,omitempty"`
	Conditions []metav1.Condition `json:"conditions"`
}

// CheckStatus is one check's verdict in a run's status.
type CheckStatus struct {
	Name    string        `json:"name"`
	Verdict specs.Verdict `json:"verdict"`
	Skipped bool          `json:"skipped,omitempty"`
}

// condition is a compact form of the Ready/Reconciling/Stalled triple.
type condition struct {
	ready, reconciling, stalled metav1.ConditionStatus
	reason, msg, run            string
}

func ready(reason, msg, run string) condition {
	return condition{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionFalse, reason, msg, run}
}

func progressing(reason, msg, run string) condition {
	return condition{metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, reason, msg, run}
}

// waiting is "retry later": not ready, still reconciling, not stalled.
func waiting(reason, msg string) condition {
	return condition{metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, reason, msg, ""}
}

// stalled is "a person must act".
func stalled(reason, msg string) condition {
	return condition{metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionTrue, reason, msg, ""}
}

func (c condition) conditions(now time.Time) []metav1.Condition {
	t := metav1.NewTime(now)
	out := []metav1.Condition{{Type: meta.ReadyCondition, Status: c.ready, Reason: c.reason, Message: c.msg, LastTransitionTime: t}}
	if c.reconciling == metav1.ConditionTrue {
		out = append(out, metav1.Condition{Type: meta.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: meta.ProgressingReason, Message: c.msg, LastTransitionTime: t})
	}
	if c.stalled == metav1.ConditionTrue {
		out = append(out, metav1.Condition{Type: meta.StalledCondition, Status: metav1.ConditionTrue, Reason: c.reason, Message: c.msg, LastTransitionTime: t})
	}
	return out
}

func runStatus(rs *runState) RunStatus {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st := RunStatus{ID: rs.id, Phase: rs.phase, Verdict: rs.verdict, Dir: rs.dir, Deadline: rs.adm.RunDeadline, Released: rs.released, Retained: rs.retained}
	for _, p := range rs.adm.Participants {
		st.Nodes = append(st.Nodes, p.Node)
	}
	for _, s := range rs.summaries {
		st.Checks = append(st.Checks, CheckStatus{Name: s.Check, Verdict: s.Verdict, Skipped: s.Skipped})
	}
	st.Conditions = RunConditions(rs.id, rs.phase, rs.verdict, time.Now())
	return st
}

// RunConditions are the Ready/Reconciling/Stalled conditions of a run in
// phase with verdict, the same for the daemon's /status and for `signet
// status`, which reads the evidence branch: Reconciling until the run is
// Done, then finished's.
func RunConditions(run string, phase evidence.Phase, verdict specs.Verdict, now time.Time) []metav1.Condition {
	c := progressing(meta.ProgressingReason, "run "+run+" is "+string(phase), run)
	if phase == evidence.PhaseDone {
		c = finished(run, verdict)
	}
	return c.conditions(now)
}

// finished is the condition of a run that reached verdict, and of its
// request, as Flux users read conditions: only a Pass is Ready=True
// (reason Succeeded); Fail, Error, Inconclusive and Canceled are
// Ready=False and Stalled=True with reason Failed (a person must act: a
// retained node waits for an approved release, and a request runs once),
// the verdict in the message. TestConditionTable is the table.
func finished(run string, verdict specs.Verdict) condition {
	if verdict == specs.VerdictPass {
		return ready(meta.SucceededReason, "run "+run+" finished: Pass", run)
	}
	c := stalled(meta.FailedReason, "run "+run+" finished: "+string(verdict))
	c.run = run
	return c
}

// publish replaces the object statuses after a pass.
func (r *Reconciler) publish(rev string, objs map[string]ObjectStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.Revision = rev
	r.status.Objects = r.status.Objects[:0]
	for _, o := range objs {
		r.status.Objects = append(r.status.Objects, o)
	}
	slices.SortFunc(r.status.Objects, func(a, b ObjectStatus) int {
		if a.Kind != b.Kind {
			if a.Kind < b.Kind {
				return -1
			}
			return 1
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	r.status.Conditions = ready(meta.SucceededReason, "reconciled revision "+short(rev), "").conditions(r.now())
}

func (r *Reconciler) setStalled(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.Conditions = waiting(meta.FailedReason, err.Error()).conditions(r.now())
}

func (r *Reconciler) setReady() {
	r.mu.Lock()
	r.ready = true
	r.mu.Unlock()
}

// Ready reports whether recovery has finished.
func (r *Reconciler) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready
}

// Status returns a copy of the current status.
func (r *Reconciler) Status() Status {
	r.mu.Lock()
	st := r.status
	st.Cluster = r.cfg.Cluster
	st.Objects = slices.Clone(r.status.Objects)
	runs := make([]*runState, 0, len(r.runs))
	for _, rs := range r.runs {
		runs = append(runs, rs)
	}
	for _, rst := range r.recent {
		if _, full := r.runs[rst.ID]; !full {
			st.Runs = append(st.Runs, rst)
		}
	}
	// LastPass is replaced under r.mu when a pass ends: copy it here.
	st.LastPass = nil
	if r.status.LastPass != nil {
		lp := *r.status.LastPass
		st.LastPass = &lp
	}
	st.Passes = slices.Clone(r.status.Passes)
	r.mu.Unlock()
	for _, rs := range runs {
		st.Runs = append(st.Runs, runStatus(rs))
	}
	slices.SortFunc(st.Runs, func(a, b RunStatus) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	st.Holds = r.holds.snapshot()
	ctx, cancel := context.WithTimeout(context.Background(), certificationsTimeout)
	defer cancel()
	certs, errs := r.certifications(ctx)
	for _, c := range certs {
		st.Certified = append(st.Certified, CertifiedNode{Node: c.Node, Profile: c.Profile, Run: c.Run, Until: c.Until.UTC()})
	}
	slices.SortFunc(st.Certified, func(a, b CertifiedNode) int { return strings.Compare(a.Node, b.Node) })
	if len(errs) > 0 {
		st.CertifiedError = errors.Join(errs...).Error()
	}
	st.UpdatedAt = r.now()
	return st
}

// Finished returns the status of run id when it finished: in full when
// the reconciler holds it so, else what it keeps of it compact (phase,
// verdict, directory, released nodes; no checks: Wait reads those).
func (r *Reconciler) Finished(id string) (RunStatus, bool) {
	r.mu.Lock()
	rs, fr := r.runs[id], r.finished[id]
	r.mu.Unlock()
	switch {
	case rs != nil:
		st := runStatus(rs)
		return st, st.Phase == evidence.PhaseDone
	case fr != nil:
		return RunStatus{
			ID: id, Phase: evidence.PhaseDone, Verdict: fr.verdict, Dir: fr.dir, Released: fr.released,
			Conditions: RunConditions(id, evidence.PhaseDone, fr.verdict, r.now()),
		}, true
	}
	return RunStatus{}, false
}

// What a request that is not admitted waits for (WaitingRequest.For).
const (
	WaitingForApproval = "approval"
	WaitingForNodes    = "nodes"
)

// WaitingRequest is a request the admission gates stopped because an
// approval is missing (its own or its profile's) or its nodes are busy or
// not eligible now; Message is the gate's own words (which threshold is
// not met, which node is held by which run).
type WaitingRequest struct {
	Cluster string `json:"cluster"`
	Request string `json:"request"`
	For     string `json:"for"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Waiting lists the requests of st, in name order, that wait for an
// approval (Ready reason NotApproved or ProfileNotApproved) or for nodes
// (NodesBusy, NodesIneligible). A request refused for another reason
// (invalid, over the ceiling, canceled before admission) is not waiting:
// it is in st with its Stalled condition.
func Waiting(st Status) []WaitingRequest {
	var out []WaitingRequest
	for _, o := range st.Objects {
		if o.Kind != specs.KindRequest || o.Run != "" || len(o.Conditions) == 0 {
			continue
		}
		c := o.Conditions[0] // Ready, always first
		if c.Type != meta.ReadyCondition || c.Status != metav1.ConditionFalse {
			continue
		}
		w := WaitingRequest{Cluster: st.Cluster, Request: o.Name, Reason: c.Reason, Message: c.Message}
		switch c.Reason {
		case "NotApproved", "ProfileNotApproved":
			w.For = WaitingForApproval
		case "NodesBusy", "NodesIneligible":
			w.For = WaitingForNodes
		default:
			continue
		}
		out = append(out, w)
	}
	return out
}

// StandingRow is one standing certification as a daemon's /status shows
// it: its Ready condition and, once it passed its gates, its pool,
// budget and next due time.
type StandingRow struct {
	Cluster string `json:"cluster"`
	Name    string `json:"name"`
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	*StandingStatus
}

// Standings lists the standing certifications of st.
func Standings(st Status) []StandingRow {
	var out []StandingRow
	for _, o := range st.Objects {
		if o.Kind != specs.KindStanding || len(o.Conditions) == 0 {
			continue
		}
		c := o.Conditions[0] // Ready, always first
		out = append(out, StandingRow{Cluster: st.Cluster, Name: o.Name, Ready: c.Status == metav1.ConditionTrue, Reason: c.Reason, Message: c.Message, StandingStatus: o.Standing})
	}
	return out
}
