package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// stalledError stops a request's admission until a person acts (a new
// approval, a fixed spec, a new request name). It becomes a Stalled
// condition with its reason and message.
type stalledError struct{ Reason, Message string }

func (e *stalledError) Error() string { return e.Reason + ": " + e.Message }

// waitingError stops a request's admission until something outside the
// spec repository changes. RequeueAfter > 0: what it waits on is the
// cluster, so the request is looked at again by the next poll even with
// no spec change; zero: a run of this reconciler must finish first (which
// triggers a pass itself).
type waitingError struct {
	Reason, Message string
	RequeueAfter    time.Duration
}

func (e *waitingError) Error() string { return e.Reason + ": " + e.Message }

// admission is what the gates have established about one request; each
// gate reads what the gates before it set.
type admission struct {
	o      *specs.Object
	relied []*signing.Approval // the request's approvals, then its profile's
	prof   *specs.Object
	family *backend.Family
	nodes  []string
	// firing is set when the run is a standing certification's firing:
	// its directory is dated by the firing and its admission binds it.
	firing *firedRun
	// unclaim ends the pass's claim step (claimed) when it is still
	// held; it may be called more than once.
	unclaim func()
}

// endClaim ends a's claim step if it is still held.
func (a *admission) endClaim() {
	if a.unclaim != nil {
		a.unclaim()
	}
}

// gate is one admission step of a request not yet admitted. It returns nil
// to go on, a *stalledError or *waitingError to stop admission there, or
// any other error when the whole pass is unreliable. No gate writes to the
// evidence branch.
type gate func(ctx context.Context, p *pass, a *admission) error

// admissionGates are the steps a request passes, in order, before its
// admission record is written (DESIGN §5 step 1).
var admissionGates = []gate{
	notCanceled,
	valid,
	approved,
	profileFound,
	profileValid,
	profileApproved,
	withinCeiling,
	claimed,
}

// request acts on one request: admit it, or act on its run's cancel and
// release. It returns an error only for failures that make the whole pass
// unreliable (the evidence branch could not be read or written).
func (p *pass) request(ctx context.Context, o *specs.Object) (bool, error) {
	r := p.r
	run := o.Name
	r.mu.Lock()
	rs, fr := r.runs[run], r.finished[run]
	r.mu.Unlock()
	if rs == nil && fr != nil {
		// Finished, retaining nothing: its condition needs no read.
		p.set(o, requestCondition(o, run, fr.request, true, evidence.PhaseDone, fr.verdict))
		return false, nil
	}
	if rs == nil {
		exists, err := r.store.Exists(ctx, evidence.IndexPath(r.cfg.Cluster, run))
		if err != nil {
			return false, err
		}
		if exists {
			loaded, err := r.loadRun(ctx, run)
			if err != nil {
				return false, fmt.Errorf("run %s: %w", run, err)
			}
			rs = loaded
			r.retire(rs) // finished and retaining nothing: kept compact from here on
		}
	}
	if rs != nil {
		return false, p.admittedRequest(ctx, o, rs)
	}
	err := p.admitNew(ctx, o)
	return err == nil, p.settle(o, err)
}

// admitNew runs the gates, writes the admission record and starts the run.
// The holds taken by the last gate are given back when admission fails.
func (p *pass) admitNew(ctx context.Context, o *specs.Object) error {
	a := &admission{o: o}
	defer a.endClaim()
	for _, g := range admissionGates {
		if err := g(ctx, p, a); err != nil {
			return err
		}
	}
	rs, err := p.r.admit(ctx, p, a)
	if err != nil {
		p.r.holds.release(o.Name, a.nodes)
		p.mu.Lock()
		p.holdGivenBack = true
		p.mu.Unlock()
		return p.admitFailed(o.Name, err)
	}
	p.r.startRun(rs)
	return nil
}

// admitFailed classifies a failed admission of run: a *stalledError as it
// is, busy or ineligible nodes as waiting, anything else as an error of
// the pass.
func (p *pass) admitFailed(run string, err error) error {
	var st *stalledError
	if errors.As(err, &st) {
		return err
	}
	if w := p.nodesWait(err); w != nil {
		return w
	}
	return fmt.Errorf("admit %s: %w", run, err)
}

// settle is the one place an admission's outcome becomes the request's
// condition: nil is Admitted, a *stalledError Stalled, a *waitingError
// waiting (with the next pass not a no-op when it waits on the cluster).
// Any other error is returned: the pass stops.
func (p *pass) settle(o *specs.Object, err error) error {
	var st *stalledError
	var w *waitingError
	switch {
	case err == nil:
		p.set(o, progressing("Admitted", "run admitted", o.Name))
	case errors.As(err, &st):
		p.set(o, stalled(st.Reason, st.Message))
	case errors.As(err, &w):
		p.set(o, waiting(w.Reason, w.Message))
		p.mu.Lock()
		p.waitingOnCluster = p.waitingOnCluster || w.RequeueAfter > 0
		p.mu.Unlock()
	default:
		return err
	}
	return nil
}

// nodesWait returns the waitingError of err when it says the request's
// nodes are busy or not eligible now, or nil. Since the cluster can change
// without a spec commit, the request is looked at again on the next poll.
func (p *pass) nodesWait(err error) error {
	reason := "NodesBusy"
	switch {
	case errors.Is(err, backend.ErrBusy):
	case errors.Is(err, backend.ErrIneligible):
		reason = "NodesIneligible"
	default:
		return nil
	}
	return &waitingError{Reason: reason, Message: err.Error(), RequeueAfter: p.r.cfg.interval()}
}

// notCanceled reads spec.cancel: a request canceled before admission is
// never run.
func notCanceled(_ context.Context, _ *pass, a *admission) error {
	if a.o.Request.Spec.Cancel {
		return &stalledError{"CanceledBeforeAdmission", "spec.cancel is true: the request is never run"}
	}
	return nil
}

// valid reads the rendering's findings of the request.
func valid(_ context.Context, p *pass, a *admission) error {
	return p.noFindings(a.o, "Invalid")
}

// approved reads the trust policy's decision on the request; writes
// a.relied.
func approved(_ context.Context, p *pass, a *admission) (err error) {
	a.relied, err = p.approval(a.o, "NotApproved")
	return err
}

// profileFound reads the request's spec.profile; writes a.prof.
func profileFound(_ context.Context, p *pass, a *admission) error {
	name := a.o.Request.Spec.Profile
	if a.prof = p.rendering.Profile(name); a.prof == nil {
		return &stalledError{"ProfileNotFound", fmt.Sprintf("spec.profile: %q is not in the rendered spec", name)}
	}
	return nil
}

// profileValid reads the rendering's findings of a.prof.
func profileValid(_ context.Context, p *pass, a *admission) error {
	return p.noFindings(a.prof, "ProfileInvalid")
}

// profileApproved reads the trust policy's decision on a.prof; appends to
// a.relied.
func profileApproved(_ context.Context, p *pass, a *admission) error {
	relied, err := p.approval(a.prof, "ProfileNotApproved")
	a.relied = append(a.relied, relied...)
	return err
}

// noFindings stalls with reason, listing the rendering's findings of o,
// when there are any.
func (p *pass) noFindings(o *specs.Object, reason string) error {
	if f := p.findings(o); len(f) > 0 {
		return &stalledError{reason, strings.Join(f, "; ")}
	}
	return nil
}

// approval returns the approvals the trust policy relies on to approve o,
// or stalls with reason and the policy's reasons.
func (p *pass) approval(o *specs.Object, reason string) ([]*signing.Approval, error) {
	d := p.decide(o.Ref(), o.Digest)
	if !d.Approved {
		return nil, &stalledError{reason, strings.Join(d.Reasons, "; ")}
	}
	return d.Relied, nil
}

// withinCeiling reads the configured ceiling and the check kinds the
// reconciler's families serve.
func withinCeiling(_ context.Context, p *pass, a *admission) error {
	prof := a.prof
	v := p.r.cfg.Ceiling.Check(prof.Profile, p.r.serves)
	if len(v) == 0 {
		return nil
	}
	msgs := make([]string, len(v))
	for i, x := range v {
		msgs[i] = x.String()
	}
	return &stalledError{"ExceedsCeiling", fmt.Sprintf("profile %s asks for more than this reconciler allows: %s", prof.Name, strings.Join(msgs, "; "))}
}

// withParticipants asks the Fleet of the family serving a.prof for the
// request's nodes (explicit names, or selector and count, each eligible);
// writes a.family and a.nodes. Busy or ineligible nodes wait; anything
// else stalls.
func withParticipants(ctx context.Context, p *pass, a *admission) error {
	fam, err := p.r.familyFor(a.prof.Profile)
	if err == nil {
		a.family = fam
		a.nodes, err = fam.Fleet.Select(ctx, a.prof.Profile, a.o.Request)
	}
	if w := p.nodesWait(err); w != nil {
		return w
	}
	if err != nil {
		return &stalledError{"NoParticipants", err.Error()}
	}
	return nil
}

// claimed is withParticipants then held, one request at a time and in
// spec order among the requests a pass admits at once (each waits for the
// claim of the request before it to end, see pass.requests), so that a
// node two requests want goes to the one earlier in the spec, as when
// they were admitted one after another. Explicit nodes end the claim once
// they are held. A request that chooses its nodes by selector keeps the
// claim until its reservation in the Fleet is written or refused (admit
// ends it), as the Fleet's selection sees its reservations but not the
// reconciler's holds: the next selector request then chooses other nodes
// instead of the same ones, which it would have to wait for. The holds
// refuse a node in two runs whatever the order; the claim only orders who
// gets it.
func claimed(ctx context.Context, p *pass, a *admission) error {
	end, err := p.claim(ctx, a.o)
	if err != nil {
		return err
	}
	a.unclaim = end
	err = withParticipants(ctx, p, a)
	if err == nil {
		err = held(ctx, p, a)
	}
	if err != nil || len(a.o.Request.Spec.Nodes) > 0 {
		a.unclaim()
	}
	return err
}

// held takes a.nodes in the reconciler's holds (a node is never in two of
// its runs); writes the holds, which admitNew gives back when admission
// fails later. A node held by another run waits until that run finishes.
func held(_ context.Context, p *pass, a *admission) error {
	if err := p.r.holds.reserve(a.o.Name, a.nodes); err != nil {
		p.mu.Lock()
		p.refusedByHold = true
		p.mu.Unlock()
		return &waitingError{Reason: "NodesBusy", Message: err.Error()}
	}
	return nil
}

// admit writes the run's admission record: the frozen profile and request,
// bundle and script digests, spec commit, trust-policy digest, node
// snapshots, the approvals relied on, and the create-only run-ID index. A
// name already used is refused: collisions are terminal.
func (r *Reconciler) admit(ctx context.Context, p *pass, a *admission) (*runState, error) {
	o, prof, nodes, fleet := a.o, a.prof, a.nodes, a.family.Fleet
	run := o.Name
	now := r.now()
	dir := evidence.RunDir(r.cfg.Cluster, run, now)
	if a.firing != nil {
		dir = evidence.RunDir(r.cfg.Cluster, run, a.firing.firing.FiredAt)
	}
	bundle, ok := p.rendering.Bundles[prof.Name]
	if !ok {
		return nil, &stalledError{"BundleUnreadable", fmt.Sprintf("the bundle of profile %s could not be read", prof.Name)}
	}
	adm := evidence.Admission{
		Cluster: r.cfg.Cluster, Run: run, AdmittedAt: now, SpecRepository: redactURL(r.cfg.Spec.URL),
		SpecCommit: p.rev, SpecPath: r.cfg.Spec.Path, TrustPolicyDigest: p.policy.Digest(),
		Request: evidence.ObjectRef{Kind: o.Kind, Name: o.Name, Digest: o.Digest}, RequestObject: *o.Request,
		Profile: evidence.ObjectRef{Kind: prof.Kind, Name: prof.Name, Digest: prof.Digest}, ProfileObject: *prof.Profile,
		Bundle:      evidence.BundleRecord{Path: prof.Profile.Spec.Bundle.Path, Digest: bundle.Digest},
		RunDeadline: now.Add(prof.Profile.RunDeadline()),
	}
	if a.firing != nil {
		ref := a.firing.ref
		adm.Firing = &ref
	}
	for _, f := range bundle.Files {
		adm.Bundle.Files = append(adm.Bundle.Files, evidence.FileRef{Path: f.Path, Digest: f.Digest})
	}
	var files []evidence.File
	snaps, errs := backend.Snapshots(ctx, fleet, r.cfg.Cluster, run, nodes)
	for i, node := range nodes {
		if errs[i] != nil {
			return nil, fmt.Errorf("snapshot of node %s: %w", node, errs[i])
		}
		snap := snaps[i]
		b, err := json.MarshalIndent(snap, "", "  ")
		if err != nil {
			return nil, err
		}
		np := evidence.NodePath(dir, node)
		files = append(files, evidence.File{Path: np, Data: b})
		adm.Participants = append(adm.Participants, evidence.Participant{Index: i, Node: node, UID: snap.UID, Snapshot: evidence.FileRef{Path: np, Digest: specs.DigestOf(b)}})
	}
	files = append(files, approvalCopies(dir, "", a.relied, &adm.Approvals)...)
	subjects := []signing.Subject{signing.SubjectFor(o.Ref(), o.Digest)}
	for _, part := range adm.Participants {
		subjects = append(subjects, signing.SubjectFor(part.Snapshot.Path, part.Snapshot.Digest))
	}
	admPath := path.Join(dir, evidence.AdmissionFile)
	f, err := r.document(admPath, evidence.PredicateAdmission, subjects, adm)
	if err != nil {
		return nil, err
	}
	files = append(files, f)
	if a.firing == nil {
		// A fired run's index entry came with its firing.
		files = append(files, evidence.File{Path: evidence.IndexPath(r.cfg.Cluster, run), Data: []byte(dir + "\n")})
	}
	// Reservation of the whole group (DESIGN §5 step 2) happens before the
	// admission record is pushed, so that a group that cannot be reserved
	// leaves no run behind: the request waits and nothing is changed. A
	// crash between the two leaves a reservation naming a run the branch
	// does not know; Recover repairs it.
	group := make([]backend.Node, 0, len(adm.Participants))
	for _, part := range adm.Participants {
		group = append(group, backend.Node{Name: part.Node, UID: part.UID})
	}
	err = fleet.Reserve(ctx, run, group)
	a.endClaim()
	if err != nil {
		return nil, fmt.Errorf("reserving %s: %w", strings.Join(nodes, ", "), err)
	}
	crash.Point("after-reservation")
	if _, err := r.appendEvidence(ctx, fmt.Sprintf("signet: %s/%s admitted (%s@%s)", r.cfg.Cluster, run, prof.Name, short(p.rev)), files); err != nil {
		if a.firing != nil && errors.Is(err, evidence.ErrExists) {
			// Another reconciler admitted the same firing: the
			// reservation under this run ID is its run's.
			return nil, errAdmittedElsewhere
		}
		r.unreserve(ctx, fleet, run, group)
		if errors.Is(err, evidence.ErrExists) {
			return nil, &stalledError{"NameCollision", fmt.Sprintf("run ID %q is already used in cluster %s (or was admitted concurrently): use a new request name", run, r.cfg.Cluster)}
		}
		return nil, err
	}
	crash.Point("after-admission")
	r.log.Info("run admitted", "run", run, "profile", prof.Name, "nodes", nodes, "specCommit", p.rev)
	return newRunState(dir, adm, evidence.FileRef{Path: admPath, Digest: specs.DigestOf(f.Data)}), nil
}

// unreserve rolls back a reservation whose admission was not recorded.
// A failure is logged: Recover repairs what is left.
func (r *Reconciler) unreserve(ctx context.Context, fleet backend.Fleet, run string, group []backend.Node) {
	for _, n := range group {
		if err := fleet.Release(context.WithoutCancel(ctx), run, n); err != nil && !errors.Is(err, backend.ErrNotOurs) {
			r.log.Error("rolling back a reservation failed; the next start repairs it", "run", run, "node", n.Name, "error", err)
		}
	}
}
