package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

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
	r.mu.Lock()
	r.passes++
	ps := PassStatus{Number: r.passes, StartedAt: r.now()}
	r.mu.Unlock()
	defer func() {
		r.metrics.reconcileDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			r.metrics.errors.WithLabelValues("reconcile").Inc()
			r.setStalled(err)
			ps.Error = err.Error()
		} else {
			ps.Revision, ps.Noop, ps.Admitted = res.Revision, res.Noop, res.Admitted
		}
		ps.FinishedAt = r.now()
		r.passEnded(ps)
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
		r.metrics.lastSuccess.SetToCurrentTime()
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
	if res.Admitted, err = pass.requests(ctx); err != nil {
		return nil, err
	}
	for _, o := range rendering.Objects {
		if o.Kind != specs.KindStanding || r.only != "" {
			continue
		}
		if err := pass.standingCertification(ctx, o); err != nil {
			return nil, err
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
	r.metrics.lastSuccess.SetToCurrentTime()
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
	// turns order the claim steps (claimed) of the requests a pass
	// admits at once, by request object; claimMu is the claim of a
	// request without a turn.
	turns   map[*specs.Object]*turn
	claimMu sync.Mutex

	// mu guards statuses and waitingOnCluster, written by the requests
	// a pass admits at once.
	mu sync.Mutex
	// waitingOnCluster is set when a request waits for nodes whose state
	// the spec repository does not show; the next pass is then never a
	// no-op.
	waitingOnCluster bool
	// refusedByHold: a request of this pass waited for nodes held by
	// another run; holdGivenBack: a request of this pass gave back the
	// holds of an admission that failed. Both together: a request may
	// have waited for a hold that no run keeps, so the next pass is
	// not a no-op.
	refusedByHold, holdGivenBack bool
}

func (p *pass) set(o *specs.Object, cond condition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.statuses[o.Ref()] = ObjectStatus{Kind: o.Kind, Name: o.Name, Digest: o.Digest, Conditions: cond.conditions(p.now), Run: cond.run}
}

// turn is one request's claim step in a pass: it begins once after is
// closed (nil: at once) and ends (done closed, by end) when its claim ends
// or the request does.
type turn struct {
	after, done chan struct{}
	end         func()
}

// claim waits for request o's turn to claim nodes and returns the
// function that ends it (which may be called more than once); a request
// without a turn claims under claimMu.
func (p *pass) claim(ctx context.Context, o *specs.Object) (func(), error) {
	t := p.turns[o]
	if t == nil {
		p.claimMu.Lock()
		return sync.OnceFunc(p.claimMu.Unlock), nil
	}
	if t.after != nil {
		select {
		case <-t.after:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return t.end, nil
}

// requests acts on every request of the rendering (only r.only's when
// set) through request, at most admission.concurrency at once, started
// in spec order. It returns the requests admitted, in spec order. When one
// fails the whole pass (an error of request), no further request is
// started, those already started end, and the first such error in spec
// order is returned; with a concurrency of 1 that is exactly one request
// after another, stopping at the first error.
func (p *pass) requests(ctx context.Context) ([]string, error) {
	var objs []*specs.Object
	for _, o := range p.rendering.Objects {
		if o.Kind == specs.KindRequest && (p.r.only == "" || o.Name == p.r.only) {
			objs = append(objs, o)
		}
	}
	admitted := make([]bool, len(objs))
	errs := make([]error, len(objs))
	p.turns = make(map[*specs.Object]*turn, len(objs))
	var prev chan struct{}
	for _, o := range objs {
		t := &turn{after: prev, done: make(chan struct{})}
		t.end = sync.OnceFunc(func() { close(t.done) })
		p.turns[o] = t
		prev = t.done
	}
	slots := make(chan struct{}, p.r.cfg.admissionConcurrency())
	var (
		wg     sync.WaitGroup
		failed atomic.Bool
	)
	for i, o := range objs {
		slots <- struct{}{}
		if failed.Load() {
			<-slots
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer p.turns[o].end()
			admitted[i], errs[i] = p.request(ctx, o)
			if errs[i] != nil {
				failed.Store(true)
			}
			if admitted[i] {
				crash.Point("amid-admissions")
			}
		}()
	}
	wg.Wait()
	if p.refusedByHold && p.holdGivenBack {
		p.waitingOnCluster = true
	}
	var names []string
	for i, o := range objs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if admitted[i] {
			names = append(names, o.Name)
		}
	}
	return names, nil
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
	rs.mu.Lock()
	phase, hasReceipt, verdict := rs.phase, rs.receipt != nil, rs.verdict
	rs.mu.Unlock()
	cond := requestCondition(o, rs.id, rs.adm.Request.Digest, rs.finished() || hasReceipt, phase, verdict)
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
			done, err := r.releaseRun(ctx, p, rs, retained, signing.SubjectName(specs.KindRequest, o.Name, "release"), rs.adm.Request)
			if err != nil {
				return err
			}
			if !done {
				cond = stalled("ReleaseNotApproved", "spec.release is set but the release action is not approved")
				cond.run = rs.id
			} else {
				cond = finished(rs.id, verdict)
				cond.msg += "; approved release recorded: nodes " + strings.Join(retained, ", ") + " released"
			}
		}
	}
	p.set(o, cond)
	return nil
}

// requestCondition is the condition of request o whose run was admitted
// for the request digest admitted: the run's progress or, once done, its
// verdict; EditRefused when o's execution fields changed since.
func requestCondition(o *specs.Object, run string, admitted specs.Digest, done bool, phase evidence.Phase, verdict specs.Verdict) condition {
	if o.Digest != admitted {
		c := stalled("EditRefused", fmt.Sprintf("the request's execution fields changed after admission (admitted %s, now %s); the edit is refused and the original run goes on — use a new request name", admitted, o.Digest))
		c.run = run
		return c
	}
	if done {
		return finished(run, verdict)
	}
	return progressing("Running", "run "+run+" is "+string(phase), run)
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
	if _, err := r.appendEvidence(ctx, fmt.Sprintf("signet: %s/%s cancel", r.cfg.Cluster, rs.id), append(files, f)); err != nil && !errors.Is(err, evidence.ErrExists) {
		return false, err
	}
	r.log.Info("cancel recorded", "run", rs.id, "keys", d.Keys)
	rs.cancel()
	return true, nil
}

// releaseRun records an approved release and lifts what the run retains:
// subject is the release action's approval subject, approved on the
// digest of target (the admitted request, or for a fired run its standing
// certification as it is now), which the release document records.
func (r *Reconciler) releaseRun(ctx context.Context, p *pass, rs *runState, nodes []string, subject string, target evidence.ObjectRef) (bool, error) {
	rp := path.Join(rs.dir, evidence.ReleaseFile)
	if ok, err := r.store.Exists(ctx, rp); err != nil || ok {
		if ok {
			if err := r.liftRetained(ctx, rs, nodes); err != nil {
				return false, err
			}
			r.holds.release(rs.id, nodes)
			rs.markReleased(nodes)
			r.nodesFreed()
			r.retire(rs)
		}
		return ok, err
	}
	d := p.decide(subject, target.Digest)
	if !d.Approved {
		return false, nil
	}
	act := evidence.Action{Run: rs.id, Action: "release", Request: target, At: r.now(), Nodes: slices.Clone(nodes)}
	files := approvalCopies(rs.dir, "release-", d.Relied, &act.Approvals)
	f, err := r.document(rp, evidence.PredicateRelease, []signing.Subject{signing.SubjectFor(subject, target.Digest)}, act)
	if err != nil {
		return false, err
	}
	if _, err := r.appendEvidence(ctx, fmt.Sprintf("signet: %s/%s release", r.cfg.Cluster, rs.id), append(files, f)); err != nil && !errors.Is(err, evidence.ErrExists) {
		return false, err
	}
	if err := r.liftRetained(ctx, rs, nodes); err != nil {
		return false, err
	}
	r.holds.release(rs.id, nodes)
	rs.markReleased(nodes)
	r.nodesFreed()
	r.retire(rs)
	r.log.Info("release recorded", "run", rs.id, "nodes", nodes, "keys", d.Keys)
	return true, nil
}

// markReleased records in the run's status that its retained nodes were
// released by an approved release: status and `signet run` say released,
// not retained, once the release document is durable.
func (rs *runState) markReleased(nodes []string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, n := range nodes {
		if i := slices.Index(rs.retained, n); i >= 0 {
			rs.retained = slices.Delete(slices.Clone(rs.retained), i, i+1)
			rs.released = append(slices.Clone(rs.released), n)
		}
	}
	if len(rs.retained) == 0 {
		rs.retained = nil
	}
}

// liftRetained lifts, after a durable release document, the cluster
// reservation of the nodes a non-passing run retained. A node that is no
// longer the run's is left untouched (logged); other failures are retried
// on the next pass, which finds the release document and comes back here.
func (r *Reconciler) liftRetained(ctx context.Context, rs *runState, nodes []string) error {
	fleet := r.fleetFor(&rs.adm.ProfileObject)
	if fleet == nil {
		return nil
	}
	_, err := r.releaseNodes(ctx, fleet, rs, nodes)
	return err
}

// nodesFreed makes the next pass act again, even with nothing else
// changed, so that a request waiting for the freed nodes (NodesBusy,
// possibly looked at earlier in this very pass) is admitted.
func (r *Reconciler) nodesFreed() {
	r.mu.Lock()
	r.dirty = true
	r.mu.Unlock()
	r.wakeUp()
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// RecentPasses is how many ended passes /status keeps (Status.Passes).
const RecentPasses = 16

// passEnded records ps as the last pass unless a later-numbered pass
// ended first, and among the recent passes in number order.
func (r *Reconciler) passEnded(ps PassStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status.LastPass == nil || r.status.LastPass.Number < ps.Number {
		r.status.LastPass = &ps
	}
	i, _ := slices.BinarySearchFunc(r.status.Passes, ps.Number, func(p PassStatus, n int64) int { return cmp.Compare(p.Number, n) })
	r.status.Passes = slices.Insert(r.status.Passes, i, ps)
	if n := len(r.status.Passes); n > RecentPasses {
		r.status.Passes = slices.Delete(r.status.Passes, 0, n-RecentPasses)
	}
}
