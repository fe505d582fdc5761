package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// NodeProvider identifies the nodes a run may use.
type NodeProvider interface {
	// Snapshot returns node's identity for run in cluster.
	Snapshot(ctx context.Context, cluster, run, node string) (*evidence.NodeSnapshot, error)
}

// Result summarizes one reconcile pass.
type Result struct {
	Revision string   `json:"revision"`
	Noop     bool     `json:"noop"`
	Admitted []string `json:"admitted,omitempty"`
}

// ReconcileOnce runs one pass: ask the spec remote for its revision; when
// the revision, the trust policy and the configuration are all unchanged
// and no run has finished since the last pass, stop there (no-op);
// otherwise render, verify approvals and act on every request. A problem
// with one object is reported in its status and never blocks the others.
func (r *Reconciler) ReconcileOnce(ctx context.Context) (res *Result, err error) {
	start := time.Now()
	defer func() {
		r.metrics.reconcileDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			r.metrics.errors.WithLabelValues("reconcile").Inc()
			r.setStalled(err)
		}
	}()
	policy, err := r.loadPolicy()
	if err != nil {
		return nil, fmt.Errorf("trust policy: %w", err)
	}
	rev, err := r.source.Revision(ctx)
	if err != nil {
		return nil, fmt.Errorf("spec repository: %w", err)
	}
	key := r.noopKey(rev, policy)
	r.mu.Lock()
	noop := key == r.lastKey && !r.dirty
	r.mu.Unlock()
	if noop {
		r.metrics.noops.Inc()
		return &Result{Revision: rev, Noop: true}, nil
	}
	fsys, err := r.source.Checkout(ctx, rev)
	if err != nil {
		return nil, fmt.Errorf("spec repository at %s: %w", short(rev), err)
	}
	rendering, err := specs.Render(fsys, r.cfg.Spec.Path)
	if err != nil {
		return nil, fmt.Errorf("render %s at %s: %w", r.cfg.Spec.Path, short(rev), err)
	}
	approvals, aerrs := signing.LoadApprovals(fsys, r.cfg.Spec.Path)
	for _, e := range aerrs {
		r.log.Warn("approval file ignored", "error", e)
	}
	if err := r.store.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("evidence branch: %w", err)
	}
	r.mu.Lock()
	r.dirty = false
	r.mu.Unlock()

	pass := &pass{r: r, rev: rev, rendering: rendering, approvals: approvals, policy: policy, now: r.now(), statuses: map[string]ObjectStatus{}}
	res = &Result{Revision: rev}
	for _, o := range rendering.Objects {
		if o.Kind != specs.KindRequest || (r.only != "" && o.Name != r.only) {
			continue
		}
		admitted, err := pass.request(ctx, o)
		if err != nil {
			return nil, err
		}
		if admitted {
			res.Admitted = append(res.Admitted, o.Name)
		}
	}
	for _, o := range rendering.Objects {
		if o.Kind == specs.KindProfile {
			pass.profileStatus(o)
		}
	}
	r.publish(rev, pass.statuses)
	r.mu.Lock()
	r.lastKey = key
	r.dirty = r.dirty || pass.waitingOnCluster
	r.mu.Unlock()
	return res, nil
}

// pass holds what one reconcile pass has read.
type pass struct {
	r         *Reconciler
	rev       string
	rendering *specs.Rendering
	approvals []*signing.Approval
	policy    *signing.TrustPolicy
	now       time.Time
	statuses  map[string]ObjectStatus
	// waitingOnCluster is set when a request waits for nodes whose state
	// the spec repository does not show; the next pass is then never a
	// no-op.
	waitingOnCluster bool
}

func (p *pass) set(o *specs.Object, cond condition) {
	p.statuses[o.Ref()] = ObjectStatus{Kind: o.Kind, Name: o.Name, Digest: o.Digest, Conditions: cond.conditions(p.now), Run: cond.run}
}

func (p *pass) findings(o *specs.Object) []string {
	var out []string
	for _, f := range p.rendering.Findings {
		if f.File == o.Source.File && f.Document == o.Source.Index {
			out = append(out, f.String())
		}
	}
	return out
}

func (p *pass) decide(subject string, d specs.Digest) signing.Decision {
	return p.policy.Decide(subject, d, p.approvals, p.r.cfg.Cluster, p.now)
}

func (p *pass) profileStatus(o *specs.Object) {
	if f := p.findings(o); len(f) > 0 {
		p.set(o, stalled("Invalid", strings.Join(f, "; ")))
		return
	}
	d := p.decide(o.Ref(), o.Digest)
	if !d.Approved {
		p.set(o, stalled("NotApproved", strings.Join(d.Reasons, "; ")))
		return
	}
	p.set(o, ready("Approved", "approved by "+strings.Join(d.Keys, ", "), ""))
}

// request acts on one request: admit it, or act on its run's cancel and
// release. It returns an error only for failures that make the whole pass
// unreliable (the evidence branch could not be read or written).
func (p *pass) request(ctx context.Context, o *specs.Object) (bool, error) {
	r := p.r
	req := o.Request
	run := o.Name
	r.mu.Lock()
	rs := r.runs[run]
	r.mu.Unlock()
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
		}
	}
	if rs != nil {
		return false, p.admittedRequest(ctx, o, rs)
	}
	if req.Spec.Cancel {
		p.set(o, stalled("CanceledBeforeAdmission", "spec.cancel is true: the request is never run"))
		return false, nil
	}
	if f := p.findings(o); len(f) > 0 {
		p.set(o, stalled("Invalid", strings.Join(f, "; ")))
		return false, nil
	}
	d := p.decide(o.Ref(), o.Digest)
	if !d.Approved {
		p.set(o, stalled("NotApproved", strings.Join(d.Reasons, "; ")))
		return false, nil
	}
	prof := p.rendering.Profile(req.Spec.Profile)
	if prof == nil {
		p.set(o, stalled("ProfileNotFound", fmt.Sprintf("spec.profile: %q is not in the rendered spec", req.Spec.Profile)))
		return false, nil
	}
	if f := p.findings(prof); len(f) > 0 {
		p.set(o, stalled("ProfileInvalid", strings.Join(f, "; ")))
		return false, nil
	}
	pd := p.decide(prof.Ref(), prof.Digest)
	if !pd.Approved {
		p.set(o, stalled("ProfileNotApproved", strings.Join(pd.Reasons, "; ")))
		return false, nil
	}
	if v := r.cfg.Ceiling.Check(prof.Profile, r.cfg.Backends); len(v) > 0 {
		msgs := make([]string, len(v))
		for i, x := range v {
			msgs[i] = x.String()
		}
		p.set(o, stalled("ExceedsCeiling", fmt.Sprintf("profile %s asks for more than this reconciler allows: %s", prof.Name, strings.Join(msgs, "; "))))
		return false, nil
	}
	nodes, err := r.participants(ctx, prof.Profile, req)
	switch {
	case p.waitForNodes(o, err):
		return false, nil
	case err != nil:
		p.set(o, stalled("NoParticipants", err.Error()))
		return false, nil
	}
	if err := r.holds.reserve(run, nodes); err != nil {
		p.set(o, waiting("NodesBusy", err.Error()))
		return false, nil
	}
	rs, err = r.admit(ctx, p, o, prof, nodes, append(d.Relied, pd.Relied...))
	if err != nil {
		r.holds.release(run, nodes)
		var refused *refusedError
		if errors.As(err, &refused) {
			p.set(o, stalled(refused.reason, refused.msg))
			return false, nil
		}
		if p.waitForNodes(o, err) {
			return false, nil
		}
		return false, fmt.Errorf("admit %s: %w", run, err)
	}
	p.set(o, progressing("Admitted", "run admitted", run))
	r.startRun(rs)
	return true, nil
}

// waitForNodes reports whether err says the request's nodes are busy or
// not eligible now; the request then waits, and since the cluster can
// change without a spec commit, the next pass is not a no-op.
func (p *pass) waitForNodes(o *specs.Object, err error) bool {
	reason := "NodesBusy"
	switch {
	case errors.Is(err, backend.ErrBusy):
	case errors.Is(err, backend.ErrIneligible):
		reason = "NodesIneligible"
	default:
		return false
	}
	p.set(o, waiting(reason, err.Error()))
	p.waitingOnCluster = true
	return true
}

// refusedError is a terminal refusal of one request: a person must act.
type refusedError struct{ reason, msg string }

func (e *refusedError) Error() string { return e.reason + ": " + e.msg }

// participants resolves the nodes of a request. A local profile's one
// participant is this machine; any other profile's come from the Fleet
// (explicit names or selector and count, each node eligible).
func (r *Reconciler) participants(ctx context.Context, prof *specs.CertificationProfile, req *specs.CertificationRequest) ([]string, error) {
	if !isLocalProfile(prof) {
		if r.fleet == nil {
			return nil, fmt.Errorf("profile %s has pod or mpijob checks; no Kubernetes backend is configured", prof.Metadata.Name)
		}
		return r.fleet.Select(ctx, prof, req)
	}
	if len(req.Spec.Nodes) != 1 || (req.Spec.Nodes[0] != "localhost" && req.Spec.Nodes[0] != r.hostname) {
		return nil, fmt.Errorf("spec.nodes: a local profile's only participant is this machine, named %q or \"localhost\"; got %q", r.hostname, req.Spec.Nodes)
	}
	return []string{r.hostname}, nil
}

// isLocalProfile reports whether every check of prof runs on the local
// backend (validation refuses a profile mixing local with other backends).
func isLocalProfile(prof *specs.CertificationProfile) bool {
	local := len(prof.Spec.Checks) > 0
	for _, c := range prof.Spec.Checks {
		local = local && c.Backend == specs.BackendLocal
	}
	return local
}

// admit writes the run's admission record: the frozen profile and request,
// bundle and script digests, spec commit, trust-policy digest, node
// snapshots, the approvals relied on, and the create-only run-ID index. A
// name already used is refused: collisions are terminal.
func (r *Reconciler) admit(ctx context.Context, p *pass, o, prof *specs.Object, nodes []string, relied []*signing.Approval) (*runState, error) {
	run := o.Name
	now := r.now()
	dir := evidence.RunDir(r.cfg.Cluster, run, now)
	bundle, ok := p.rendering.Bundles[prof.Name]
	if !ok {
		return nil, &refusedError{"BundleUnreadable", fmt.Sprintf("the bundle of profile %s could not be read", prof.Name)}
	}
	adm := evidence.Admission{
		Cluster: r.cfg.Cluster, Run: run, AdmittedAt: now, SpecRepository: redactURL(r.cfg.Spec.URL),
		SpecCommit: p.rev, SpecPath: r.cfg.Spec.Path, TrustPolicyDigest: p.policy.Digest(),
		Request: evidence.ObjectRef{Kind: o.Kind, Name: o.Name, Digest: o.Digest}, RequestObject: *o.Request,
		Profile: evidence.ObjectRef{Kind: prof.Kind, Name: prof.Name, Digest: prof.Digest}, ProfileObject: *prof.Profile,
		Bundle:      evidence.BundleRecord{Path: prof.Profile.Spec.Bundle.Path, Digest: bundle.Digest},
		RunDeadline: now.Add(prof.Profile.RunDeadline()),
	}
	for _, f := range bundle.Files {
		adm.Bundle.Files = append(adm.Bundle.Files, evidence.FileRef{Path: f.Path, Digest: f.Digest})
	}
	kube := !isLocalProfile(prof.Profile)
	var files []evidence.File
	for i, n := range nodes {
		node := n
		if node == "localhost" {
			node = r.hostname
		}
		var snap *evidence.NodeSnapshot
		var err error
		if kube {
			snap, err = r.fleet.Snapshot(ctx, r.cfg.Cluster, run, node)
		} else {
			snap, err = r.nodes.Snapshot(ctx, r.cfg.Cluster, run, node)
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot of node %s: %w", node, err)
		}
		b, err := json.MarshalIndent(snap, "", "  ")
		if err != nil {
			return nil, err
		}
		np := evidence.NodePath(dir, node)
		files = append(files, evidence.File{Path: np, Data: b})
		adm.Participants = append(adm.Participants, evidence.Participant{Index: i, Node: node, UID: snap.UID, Snapshot: evidence.FileRef{Path: np, Digest: specs.DigestOf(b)}})
	}
	files = append(files, approvalCopies(dir, "", relied, &adm.Approvals)...)
	subjects := []signing.Subject{signing.SubjectFor(o.Ref(), o.Digest)}
	for _, part := range adm.Participants {
		subjects = append(subjects, signing.SubjectFor(part.Snapshot.Path, part.Snapshot.Digest))
	}
	admPath := path.Join(dir, evidence.AdmissionFile)
	f, err := r.document(admPath, evidence.PredicateAdmission, subjects, adm)
	if err != nil {
		return nil, err
	}
	files = append(files, f, evidence.File{Path: evidence.IndexPath(r.cfg.Cluster, run), Data: []byte(dir + "\n")})
	// Reservation of the whole group (DESIGN §5 step 2) happens before the
	// admission record is pushed, so that a group that cannot be reserved
	// leaves no run behind: the request waits and nothing is changed. A
	// crash between the two leaves a reservation naming a run the branch
	// does not know; Recover repairs it.
	var group []backend.Node
	if kube {
		for _, part := range adm.Participants {
			group = append(group, backend.Node{Name: part.Node, UID: part.UID})
		}
		if err := r.fleet.Reserve(ctx, run, group); err != nil {
			return nil, fmt.Errorf("reserving %s: %w", strings.Join(nodes, ", "), err)
		}
		crash.Point("after-reservation")
	}
	if _, err := r.store.Append(ctx, fmt.Sprintf("signet: %s/%s admitted (%s@%s)", r.cfg.Cluster, run, prof.Name, short(p.rev)), files); err != nil {
		if kube {
			r.unreserve(ctx, run, group)
		}
		if errors.Is(err, evidence.ErrExists) {
			return nil, &refusedError{"NameCollision", fmt.Sprintf("run ID %q is already used in cluster %s (or was admitted concurrently): use a new request name", run, r.cfg.Cluster)}
		}
		return nil, err
	}
	crash.Point("after-admission")
	r.log.Info("run admitted", "run", run, "profile", prof.Name, "nodes", nodes, "specCommit", p.rev)
	return newRunState(dir, adm, evidence.FileRef{Path: admPath, Digest: specs.DigestOf(f.Data)}), nil
}

// unreserve rolls back a reservation whose admission was not recorded.
// A failure is logged: Recover repairs what is left.
func (r *Reconciler) unreserve(ctx context.Context, run string, group []backend.Node) {
	for _, n := range group {
		if err := r.fleet.Release(context.WithoutCancel(ctx), run, n); err != nil && !errors.Is(err, backend.ErrNotOurs) {
			r.log.Error("rolling back a reservation failed; the next start repairs it", "run", run, "node", n.Name, "error", err)
		}
	}
}

// approvalCopies copies approvals (deduplicated by path) into the run's
// approvals/ directory, prefixing names with prefix, and records refs.
func approvalCopies(dir, prefix string, relied []*signing.Approval, refs *[]evidence.FileRef) []evidence.File {
	seen := map[string]bool{}
	names := map[string]bool{}
	var files []evidence.File
	for _, a := range relied {
		if seen[a.Path] {
			continue
		}
		seen[a.Path] = true
		name := prefix + path.Base(a.Path)
		if names[name] {
			// Same file name in another directory of .signet/approvals/.
			name = prefix + specs.DigestOf(a.Raw).Hex()[:16] + "-" + path.Base(a.Path)
		}
		names[name] = true
		ap := evidence.ApprovalPath(dir, name)
		files = append(files, evidence.File{Path: ap, Data: a.Raw})
		*refs = append(*refs, evidence.FileRef{Path: ap, Digest: specs.DigestOf(a.Raw)})
	}
	return files
}

// admittedRequest handles a request whose run exists: its execution
// fields are frozen, and cancel and release act only with their own
// approvals.
func (p *pass) admittedRequest(ctx context.Context, o *specs.Object, rs *runState) error {
	r := p.r
	admitted := rs.adm.Request.Digest
	edited := o.Digest != admitted
	rs.mu.Lock()
	phase, hasReceipt, verdict := rs.phase, rs.receipt != nil, rs.verdict
	rs.mu.Unlock()
	cond := progressing("Running", "run "+rs.id+" is "+string(phase), rs.id)
	if rs.finished() || hasReceipt {
		cond = ready("Finished", fmt.Sprintf("run %s finished: %s", rs.id, verdict), rs.id)
	}
	if edited {
		cond = stalled("EditRefused", fmt.Sprintf("the request's execution fields changed after admission (admitted %s, now %s); the edit is refused and the original run goes on — use a new request name", admitted, o.Digest))
		cond.run = rs.id
	}
	if o.Request.Spec.Cancel && !hasReceipt && !rs.finished() {
		done, err := r.cancelRun(ctx, p, o, rs)
		if err != nil {
			return err
		}
		if !done {
			cond = stalled("CancelNotApproved", "spec.cancel is set but the cancel action is not approved")
			cond.run = rs.id
		} else {
			cond = progressing("Canceling", "approved cancel recorded; stopping the run", rs.id)
		}
	}
	if o.Request.Spec.Release && (hasReceipt || rs.finished()) {
		if retained := r.holds.retainedBy(rs.id); len(retained) > 0 {
			done, err := r.releaseRun(ctx, p, o, rs, retained)
			if err != nil {
				return err
			}
			if !done {
				cond = stalled("ReleaseNotApproved", "spec.release is set but the release action is not approved")
				cond.run = rs.id
			} else {
				cond = ready("Released", "approved release recorded; nodes "+strings.Join(retained, ", ")+" released", rs.id)
			}
		}
	}
	p.set(o, cond)
	return nil
}

// cancelRun records an approved cancel and stops the run's running check.
// It reports false when the cancel is not approved.
func (r *Reconciler) cancelRun(ctx context.Context, p *pass, o *specs.Object, rs *runState) (bool, error) {
	cp := path.Join(rs.dir, evidence.CancelFile)
	rs.docMu.Lock()
	defer rs.docMu.Unlock()
	if ok, err := r.store.Exists(ctx, cp); err != nil || ok {
		if ok {
			rs.cancel()
		}
		return ok, err
	}
	// Too late: the run evidence is written; a cancel now would not be
	// reflected in it. The run finishes with its own verdict.
	if ok, err := r.store.Exists(ctx, path.Join(rs.dir, evidence.EvidenceFile)); err != nil || ok {
		return ok, err
	}
	subject := signing.SubjectName(specs.KindRequest, o.Name, "cancel")
	d := p.decide(subject, rs.adm.Request.Digest)
	if !d.Approved {
		return false, nil
	}
	act := evidence.Action{Run: rs.id, Action: "cancel", Request: rs.adm.Request, At: r.now(), Nodes: rs.nodeNames()}
	files := approvalCopies(rs.dir, "cancel-", d.Relied, &act.Approvals)
	f, err := r.document(cp, evidence.PredicateCancel, []signing.Subject{signing.SubjectFor(subject, rs.adm.Request.Digest)}, act)
	if err != nil {
		return false, err
	}
	if _, err := r.store.Append(ctx, fmt.Sprintf("signet: %s/%s cancel", r.cfg.Cluster, rs.id), append(files, f)); err != nil && !errors.Is(err, evidence.ErrExists) {
		return false, err
	}
	r.log.Info("cancel recorded", "run", rs.id, "keys", d.Keys)
	rs.cancel()
	return true, nil
}

// releaseRun records an approved release and lifts what the run retains.
func (r *Reconciler) releaseRun(ctx context.Context, p *pass, o *specs.Object, rs *runState, nodes []string) (bool, error) {
	rp := path.Join(rs.dir, evidence.ReleaseFile)
	if ok, err := r.store.Exists(ctx, rp); err != nil || ok {
		if ok {
			if err := r.liftRetained(ctx, rs, nodes); err != nil {
				return false, err
			}
			r.holds.release(rs.id, nodes)
			r.nodesFreed()
		}
		return ok, err
	}
	subject := signing.SubjectName(specs.KindRequest, o.Name, "release")
	d := p.decide(subject, rs.adm.Request.Digest)
	if !d.Approved {
		return false, nil
	}
	act := evidence.Action{Run: rs.id, Action: "release", Request: rs.adm.Request, At: r.now(), Nodes: slices.Clone(nodes)}
	files := approvalCopies(rs.dir, "release-", d.Relied, &act.Approvals)
	f, err := r.document(rp, evidence.PredicateRelease, []signing.Subject{signing.SubjectFor(subject, rs.adm.Request.Digest)}, act)
	if err != nil {
		return false, err
	}
	if _, err := r.store.Append(ctx, fmt.Sprintf("signet: %s/%s release", r.cfg.Cluster, rs.id), append(files, f)); err != nil && !errors.Is(err, evidence.ErrExists) {
		return false, err
	}
	if err := r.liftRetained(ctx, rs, nodes); err != nil {
		return false, err
	}
	r.holds.release(rs.id, nodes)
	r.nodesFreed()
	r.log.Info("release recorded", "run", rs.id, "nodes", nodes, "keys", d.Keys)
	return true, nil
}

// liftRetained lifts, after a durable release document, the cluster
// reservation of the nodes a non-passing run retained. A node that is no
// longer the run's is left untouched (logged); other failures are retried
// on the next pass, which finds the release document and comes back here.
func (r *Reconciler) liftRetained(ctx context.Context, rs *runState, nodes []string) error {
	if isLocalProfile(&rs.adm.ProfileObject) || r.fleet == nil {
		return nil
	}
	_, err := r.releaseNodes(ctx, rs, nodes)
	return err
}

// nodesFreed makes the next pass act again, even with nothing else
// changed, so that a request waiting for the freed nodes (NodesBusy,
// possibly looked at earlier in this very pass) is admitted.
func (r *Reconciler) nodesFreed() {
	r.mu.Lock()
	r.dirty = true
	r.mu.Unlock()
	r.Trigger()
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
