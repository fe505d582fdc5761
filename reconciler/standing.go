package reconciler

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/reconciler/standing"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// StandingStatus is what a standing certification is doing: its pool's
// coverage, the budget and the next firing.
type StandingStatus struct {
	// Pool is the number of nodes in the pool now.
	Pool int `json:"pool"`
	// Allowed is the budget in nodes; InUse the pool nodes signet holds
	// or a firing has claimed.
	Allowed int `json:"allowed"`
	InUse   int `json:"inUse"`
	// Certified, Expiring, Failed and Never count the pool's nodes by
	// their latest finished run of the profile: passed, passed with a
	// certification expiring within beforeExpiry, not passed, none.
	Certified int `json:"certified"`
	Expiring  int `json:"expiring"`
	Failed    int `json:"failed"`
	Never     int `json:"never"`
	// Due is the number of nodes due now; Next is when the next node not
	// yet due becomes due by time alone (zero when none will).
	Due  int       `json:"due"`
	Next time.Time `json:"next,omitzero"`
	// Waiting says why due nodes were not fired (budget spent, busy).
	Waiting string `json:"waiting,omitempty"`
	// Fired are the runs this pass fired; LastFiring the latest firing
	// on the evidence branch.
	Fired      []string `json:"fired,omitempty"`
	LastFiring string   `json:"lastFiring,omitempty"`
}

// firedRun is a firing on the evidence branch whose run has no admission
// yet: its nodes are claimed until it is admitted.
type firedRun struct {
	ref    evidence.FileRef
	firing evidence.Firing
}

// standingCertification acts on one standing certification: it resumes
// its firings that have no admission, decides which due nodes of its pool
// to certify now within its budget (standing.Decide), makes each firing
// durable before anything is reserved (evidence.Store.AppendFiring, a
// strict compare-and-swap on the tip it was decided from) and admits it.
// It returns an error only when the whole pass is unreliable.
func (p *pass) standingCertification(ctx context.Context, o *specs.Object) error {
	if err := p.standingReleases(ctx, o); err != nil {
		return err
	}
	sp, err := p.standingGates(ctx, o)
	if err != nil {
		return p.settleStanding(o, err, nil)
	}
	r := p.r
	name := o.Name
	seq, _, err := r.store.NextFiringSequence(ctx, r.cfg.Cluster, name)
	if err != nil {
		return fmt.Errorf("standing certification %s: %w", name, err)
	}
	if err := r.loadFirings(ctx, name, seq); err != nil {
		return err
	}
	// A firing recorded and never admitted (a restart, or the reconciler
	// that fired it stopped) is admitted now, never decided again.
	for _, fr := range r.firedOf(name) {
		if err := p.admitFiring(ctx, sp, fr); err != nil {
			return p.settleStanding(o, err, nil)
		}
	}
	if len(r.firedOf(name)) > 0 {
		// Decide only on a branch whose every firing is admitted.
		return p.settleStanding(o, &waitingError{Reason: "FiringNotAdmitted", Message: "a firing waits for its admission", RequeueAfter: r.cfg.interval()}, nil)
	}
	// One firing at a time, each decided from facts read after the tip
	// it is appended on, so that no firing counts on a branch older than
	// the one it lands on.
	var fired []string
	var st *StandingStatus
	moved := 0
	for {
		seq, tip, err := r.store.NextFiringSequence(ctx, r.cfg.Cluster, name)
		if err != nil {
			return fmt.Errorf("standing certification %s: %w", name, err)
		}
		// Another reconciler may have fired since the last look: its
		// firings claim their nodes before anything is decided.
		if err := r.loadFirings(ctx, name, seq); err != nil {
			return err
		}
		pool, inUse, err := r.poolFacts(ctx, sp)
		if err != nil {
			return fmt.Errorf("standing certification %s: %w", name, err)
		}
		now := r.now()
		d := standing.Decide(o.Standing.Spec, sp.prof.Profile.Spec.Participants.Min, pool, now)
		st = standingStatus(o.Standing.Spec, pool, d)
		st.Fired = fired
		if seq > 1 {
			st.LastFiring = specs.FiringRunID(name, seq-1)
		}
		if len(d.Firings) == 0 || len(fired) >= len(pool) {
			break
		}
		run, err := p.fire(ctx, sp, seq, tip, now, pool, inUse, d.Firings[0])
		if errors.Is(err, evidence.ErrTipMoved) || errors.Is(err, evidence.ErrExists) {
			// The branch moved since the decision (a run of this
			// reconciler wrote a step, or another writer): nothing was
			// recorded; decide again on the new tip, a few times, then
			// next pass.
			if moved++; moved <= maxFiringRetries {
				continue
			}
			r.log.Info("firing not recorded: the evidence branch kept moving; deciding again next pass", "standing", name, "error", err)
			break
		}
		if err != nil {
			return p.settleStanding(o, err, st)
		}
		fired = append(fired, run)
	}
	return p.settleStanding(o, nil, st)
}

// standingReleases acts on spec.release: each firing of o it lists whose
// run finished and retains nodes is released once its own action
// (StandingCertification/<name>#release:<run>, o's digest) is approved.
// A release is an action on its own: it does not need o's approval to be
// valid now, only its own. Firings not yet finished, or retaining
// nothing, are left alone.
func (p *pass) standingReleases(ctx context.Context, o *specs.Object) error {
	if len(p.findings(o)) > 0 {
		return nil
	}
	r := p.r
	for _, run := range o.Standing.Spec.Release {
		r.mu.Lock()
		rs := r.runs[run]
		r.mu.Unlock()
		if rs == nil {
			continue // not fired, or fired and not admitted: nothing retained
		}
		if err := r.refreshForeign(ctx, rs); err != nil {
			return fmt.Errorf("run %s: %w", run, err)
		}
		rs.mu.Lock()
		finished, retained := rs.receipt != nil, slices.Clone(rs.retained)
		rs.mu.Unlock()
		if !finished || rs.adm.Firing == nil || len(retained) == 0 {
			continue
		}
		subject := signing.SubjectName(specs.KindStanding, o.Name, specs.StandingReleaseAction(run))
		if _, err := r.releaseRun(ctx, p, rs, retained, subject, evidence.ObjectRef{Kind: o.Kind, Name: o.Name, Digest: o.Digest}); err != nil {
			return fmt.Errorf("release of %s: %w", run, err)
		}
	}
	return nil
}

// releasedBy is the object whose approved release action frees what the
// run retains: its request, or for a fired run the standing
// certification that fired it.
func (rs *runState) releasedBy() string {
	if i := strings.LastIndex(rs.id, "-"); rs.adm.Firing != nil && i > 0 {
		// A firing's run ID is "<standing>-<sequence>" (specs.FiringRunID).
		return specs.SubjectName(specs.KindStanding, rs.id[:i], "")
	}
	return specs.SubjectName(specs.KindRequest, rs.id, "")
}

// maxFiringRetries bounds how often one pass decides again after the
// evidence branch moved under a firing.
const maxFiringRetries = 3

// standingPass is what the gates established about a standing
// certification.
type standingPass struct {
	o      *specs.Object
	relied []*signing.Approval // the standing certification's approvals
	prof   *specs.Object
	family *backend.Family
	pooler backend.Pooler
	// members is the pool as its Fleet listed it this pass.
	members []backend.PoolMember
}

// standingGates checks a standing certification as a request's gates
// check a request: valid, approved now, its profile found, valid,
// approved and within the ceiling, a family that can list its pool.
func (p *pass) standingGates(ctx context.Context, o *specs.Object) (*standingPass, error) {
	if err := p.noFindings(o, "Invalid"); err != nil {
		return nil, err
	}
	relied, err := p.approval(o, "NotApproved")
	if err != nil {
		return nil, err
	}
	sp := &standingPass{o: o, relied: relied}
	name := o.Standing.Spec.Profile
	if sp.prof = p.rendering.Profile(name); sp.prof == nil {
		return nil, &stalledError{"ProfileNotFound", fmt.Sprintf("spec.profile: %q is not in the rendered spec", name)}
	}
	if err := p.noFindings(sp.prof, "ProfileInvalid"); err != nil {
		return nil, err
	}
	if _, err := p.approval(sp.prof, "ProfileNotApproved"); err != nil {
		return nil, err
	}
	if err := withinCeiling(ctx, p, &admission{prof: sp.prof}); err != nil {
		return nil, err
	}
	fam, err := p.r.familyFor(sp.prof.Profile)
	if err != nil {
		return nil, &stalledError{"NoBackend", err.Error()}
	}
	pooler, ok := fam.Fleet.(backend.Pooler)
	if !ok {
		return nil, &stalledError{"NoPool", fmt.Sprintf("backend family %s cannot list a pool", fam.Name)}
	}
	sp.family, sp.pooler = fam, pooler
	spec := o.Standing.Spec
	if sp.members, err = pooler.Pool(ctx, sp.prof.Profile, spec.Nodes, spec.Selector); err != nil {
		return nil, &waitingError{Reason: "PoolUnavailable", Message: err.Error(), RequeueAfter: p.r.cfg.interval()}
	}
	return sp, nil
}

// settleStanding is settle for a standing certification: nil is Ready
// with what it did, the errors as for a request.
func (p *pass) settleStanding(o *specs.Object, err error, st *StandingStatus) error {
	// Time alone makes nodes due: a pass with a standing certification is
	// never a no-op.
	p.waitingOnCluster = true
	if err == nil {
		msg := fmt.Sprintf("pool %d nodes: %d certified (%d expiring), %d failed, %d never certified; budget %d of %d in use",
			st.Pool, st.Certified, st.Expiring, st.Failed, st.Never, st.InUse, st.Allowed)
		if len(st.Fired) > 0 {
			msg += "; fired " + strings.Join(st.Fired, ", ")
		}
		if st.Waiting != "" {
			msg += "; " + st.Waiting
		}
		if !st.Next.IsZero() {
			msg += "; next due " + st.Next.UTC().Format(time.RFC3339)
		}
		cond := ready("Standing", msg, st.LastFiring)
		p.set(o, cond)
		p.setStanding(o, st)
		return nil
	}
	if e := p.settle(o, err); e != nil {
		return e
	}
	p.setStanding(o, st)
	return nil
}

func (p *pass) setStanding(o *specs.Object, st *StandingStatus) {
	if st == nil {
		return
	}
	os := p.statuses[o.Ref()]
	os.Standing = st
	p.statuses[o.Ref()] = os
}

// standingStatus summarises the pool and the decision.
func standingStatus(spec specs.StandingSpec, pool []standing.Node, d standing.Decision) *StandingStatus {
	st := &StandingStatus{Pool: d.PoolSize, Allowed: d.Allowed, InUse: d.InUse, Due: len(d.Due), Next: d.Next, Waiting: d.Waiting}
	before, _ := spec.BeforeExpiry.Duration()
	for _, n := range pool {
		switch {
		case n.Last == nil:
			st.Never++
		case n.Last.Verdict != specs.VerdictPass:
			st.Failed++
		default:
			st.Certified++
			if before > 0 && !n.Last.CertifiedUntil.IsZero() && slices.ContainsFunc(d.Due, func(due standing.Due) bool {
				return due.Node == n.Name && (due.Reason.Kind == standing.ReasonExpiry || due.Reason.Kind == standing.ReasonExpired)
			}) {
				st.Expiring++
			}
		}
	}
	return st
}

// poolFacts returns the pool's nodes as Decide reads them, and the pool
// nodes signet holds or has claimed: reserved by a run of this cluster
// without a receipt, retained by a finished run until an approved
// release, or chosen by a firing not yet admitted. Runs of every profile
// and request count: the budget bounds what signet takes out of service.
func (r *Reconciler) poolFacts(ctx context.Context, sp *standingPass) ([]standing.Node, []string, error) {
	held, claimed := map[string]bool{}, map[string]bool{}
	var latest evidence.LatestRuns
	r.mu.Lock()
	runs := make([]*runState, 0, len(r.runs))
	for _, rs := range r.runs {
		runs = append(runs, rs)
	}
	for _, fr := range r.fired {
		for _, n := range fr.firing.Nodes() {
			claimed[n] = true
		}
	}
	r.mu.Unlock()
	profile := sp.prof.Name
	if err := r.foldFinished(ctx, profile); err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	for _, nr := range r.latest.All() {
		if nr.Profile == profile {
			latest.Add(nr)
		}
	}
	r.mu.Unlock()
	for _, rs := range runs {
		if err := r.refreshForeign(ctx, rs); err != nil {
			return nil, nil, fmt.Errorf("run %s: %w", rs.id, err)
		}
		rs.mu.Lock()
		finished := rs.receipt != nil
		retained := slices.Clone(rs.retained)
		rs.mu.Unlock()
		if !finished {
			for _, n := range rs.nodeNames() {
				held[n] = true
			}
			continue
		}
		for _, n := range retained {
			held[n] = true
		}
		if rs.adm.Profile.Name != profile {
			continue
		}
		nrs, err := r.nodeRuns(ctx, rs)
		if err != nil {
			return nil, nil, fmt.Errorf("run %s: %w", rs.id, err)
		}
		for _, nr := range nrs {
			latest.Add(nr)
		}
	}
	var pool []standing.Node
	var inUse []string
	for _, m := range sp.members {
		name := m.Identity.Name
		n := standing.Node{Name: name, Identity: m.Identity, Held: held[name], Claimed: claimed[name], Busy: m.Busy != ""}
		if last, ok := latest.Latest(profile, name); ok {
			n.Last = &standing.LastRun{Run: last.Run, EndedAt: last.EndedAt, Verdict: last.Verdict, CertifiedUntil: last.CertifiedUntil, Identity: last.Identity}
		}
		if n.Held || n.Claimed {
			inUse = append(inUse, name)
		}
		pool = append(pool, n)
	}
	return pool, inUse, nil
}

// refreshForeign reads the receipt of a run another reconciler drives,
// once it is on the evidence branch (applyReceipt), so that its nodes stop
// counting as held when it ends (and its retained nodes keep counting
// until a release).
func (r *Reconciler) refreshForeign(ctx context.Context, rs *runState) error {
	rs.mu.Lock()
	skip := rs.driven || rs.receipt != nil
	rs.mu.Unlock()
	if skip {
		return nil
	}
	_, err := r.applyReceipt(ctx, rs)
	return err
}

// foldFinished adds to r.latest the node runs of the finished runs of
// profile that start-up kept as a finishedRun, reading each again in
// full, one at a time, and only once: a finished run's documents never
// change. A finished run holds none of the pool's nodes, so only its
// node runs matter here.
func (r *Reconciler) foldFinished(ctx context.Context, profile string) error {
	r.mu.Lock()
	var ids []string
	for id, fr := range r.finished {
		if fr.profile == profile && !fr.folded {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		r.foldReads.Add(1)
		rs, err := r.readRun(ctx, id)
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		nrs, err := r.nodeRuns(ctx, rs)
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		r.mu.Lock()
		for _, nr := range nrs {
			r.latest.Add(nr)
		}
		r.finished[id].folded = true
		r.mu.Unlock()
		r.foldedSince.Store(true)
	}
	return nil
}

// nodeRuns returns the NodeRuns of a finished run, read once from its
// documents on the evidence branch and kept (a finished run's documents
// never change).
func (r *Reconciler) nodeRuns(ctx context.Context, rs *runState) ([]evidence.NodeRun, error) {
	rs.mu.Lock()
	cached, evRef, rcRef := rs.nodeRunsCache, rs.evidence, rs.receipt
	rs.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	if evRef == nil || rcRef == nil {
		return nil, errors.New("finished without run evidence or receipt")
	}
	var ev evidence.RunEvidence
	if err := r.readRef(ctx, *evRef, evidence.PredicateEvidence, &ev); err != nil {
		return nil, err
	}
	var rc evidence.Receipt
	if err := r.readRef(ctx, *rcRef, evidence.PredicateReceipt, &rc); err != nil {
		return nil, err
	}
	snaps := map[string]evidence.NodeSnapshot{}
	for _, part := range rs.adm.Participants {
		b, err := r.store.Read(ctx, part.Snapshot.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", part.Snapshot.Path, err)
		}
		if specs.DigestOf(b) != part.Snapshot.Digest {
			return nil, fmt.Errorf("%s: digest is not the admitted %s", part.Snapshot.Path, part.Snapshot.Digest)
		}
		var snap evidence.NodeSnapshot
		if err := signing.StrictUnmarshal(b, &snap); err != nil {
			return nil, fmt.Errorf("%s: %w", part.Snapshot.Path, err)
		}
		snaps[part.Node] = snap
	}
	nrs := evidence.NodeRuns(&rs.adm, snaps, &ev, &rc)
	if nrs == nil {
		nrs = []evidence.NodeRun{}
	}
	rs.mu.Lock()
	rs.nodeRunsCache = nrs
	rs.mu.Unlock()
	return nrs, nil
}

// readRef reads and verifies this reconciler's document that ref names,
// whose bytes must have ref's digest.
func (r *Reconciler) readRef(ctx context.Context, ref evidence.FileRef, predicateType string, v any) error {
	b, err := r.store.Read(ctx, ref.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", ref.Path, err)
	}
	if got := specs.DigestOf(b); got != ref.Digest {
		return fmt.Errorf("%s: digest %s is not the recorded %s", ref.Path, got, ref.Digest)
	}
	if err := r.readOwn(b, predicateType, v); err != nil {
		return fmt.Errorf("%s: %w", ref.Path, err)
	}
	return nil
}

// fire makes one firing durable on tip, then admits it, and returns its
// run. An error unwrapping to ErrTipMoved or ErrExists means nothing was
// recorded (the branch moved since the decision).
func (p *pass) fire(ctx context.Context, sp *standingPass, seq int64, tip string, firedAt time.Time, pool []standing.Node, inUse []string, group []standing.Due) (string, error) {
	r := p.r
	o := sp.o
	run := specs.FiringRunID(o.Name, seq)
	dir := evidence.RunDir(r.cfg.Cluster, run, firedAt)
	uid := map[string]string{}
	fr := evidence.Firing{
		Cluster: r.cfg.Cluster, Run: run, Sequence: seq, FiredAt: firedAt, Tip: tip,
		Standing:       evidence.ObjectRef{Kind: o.Kind, Name: o.Name, Digest: o.Digest},
		StandingObject: *o.Standing,
		InUse:          nonNil(slices.Clone(inUse)),
	}
	for _, n := range pool {
		fr.Pool = append(fr.Pool, evidence.PoolNode{Node: n.Name, UID: n.Identity.UID})
		uid[n.Name] = n.Identity.UID
	}
	for _, due := range group {
		fr.Chosen = append(fr.Chosen, evidence.ChosenNode{Node: due.Node, UID: uid[due.Node], Reason: due.Reason})
	}
	files := approvalCopies(dir, "standing-", sp.relied, &fr.Approvals)
	fp := path.Join(dir, evidence.FiringFile)
	f, err := r.document(fp, evidence.PredicateFiring, []signing.Subject{signing.SubjectFor(o.Ref(), o.Digest)}, fr)
	if err != nil {
		return "", err
	}
	if _, err := r.store.AppendFiring(ctx, tip, r.cfg.Cluster, run, firedAt, f.Data, files); err != nil {
		if !errors.Is(err, evidence.ErrTipMoved) && !errors.Is(err, evidence.ErrExists) {
			r.metrics.pushFailures.Inc()
		}
		return "", err
	}
	r.log.Info("standing certification fired", "standing", o.Name, "run", run, "nodes", fr.Nodes(), "inUse", fr.InUse, "tip", tip)
	crash.Point("after-firing")
	fired := &firedRun{ref: evidence.FileRef{Path: fp, Digest: specs.DigestOf(f.Data)}, firing: fr}
	r.claim(fired)
	if err := p.admitFiring(ctx, sp, fired); err != nil {
		var w *waitingError
		if !errors.As(err, &w) {
			return "", err
		}
		// The firing stays claimed and is admitted by a later pass.
		r.log.Info("fired run waits for admission", "run", run, "reason", w.Message)
	}
	return run, nil
}

// admitFiring admits a fired run under its run ID with exactly its chosen
// nodes: the request its firing derives (evidence.FiringRequest), the
// standing certification's profile as the spec has it now, the firing
// bound by digest. A firing is admitted at most once: when another
// reconciler admitted it first, its run is loaded, not started.
func (p *pass) admitFiring(ctx context.Context, sp *standingPass, fr *firedRun) error {
	r := p.r
	// Another reconciler may have admitted it since it was loaded: then
	// it is that reconciler's run, and nothing is reserved here.
	dir := evidence.RunDir(r.cfg.Cluster, fr.firing.Run, fr.firing.FiredAt)
	if ok, err := r.store.Exists(ctx, path.Join(dir, evidence.AdmissionFile)); err != nil {
		return err
	} else if ok {
		return r.admittedElsewhere(ctx, fr, nil)
	}
	req := evidence.FiringRequest(&fr.firing)
	canon, err := specs.CanonicalRequest(&req)
	if err != nil {
		return err
	}
	o := &specs.Object{Kind: specs.KindRequest, Name: req.Metadata.Name, Request: &req, Canonical: canon, Digest: specs.DigestOf(canon)}
	profRelied, err := p.approval(sp.prof, "ProfileNotApproved")
	if err != nil {
		return err
	}
	a := &admission{o: o, relied: profRelied, prof: sp.prof, family: sp.family, nodes: fr.firing.Nodes(), firing: fr}
	if err := held(ctx, p, a); err != nil {
		return err
	}
	// On failure the claim's holds stay: the firing is admitted later.
	rs, err := r.admit(ctx, p, a)
	if err != nil {
		if errors.Is(err, errAdmittedElsewhere) {
			return r.admittedElsewhere(ctx, fr, sp.family.Fleet)
		}
		return p.admitFailed(o.Name, err)
	}
	r.mu.Lock()
	delete(r.fired, fr.firing.Run)
	r.mu.Unlock()
	r.startRun(rs)
	return nil
}

// admittedElsewhere drops the claim of a firing another reconciler
// admitted and loads its run (not driven here). When this reconciler
// reserved the firing's nodes first (fleet not nil: same run ID, so the
// reservation is the other's too) and that run already finished, the
// reservation of the nodes it released is lifted again.
func (r *Reconciler) admittedElsewhere(ctx context.Context, fr *firedRun, fleet backend.Fleet) error {
	run := fr.firing.Run
	r.holds.release(run, fr.firing.Nodes())
	r.mu.Lock()
	delete(r.fired, run)
	r.mu.Unlock()
	rs, err := r.loadForeign(ctx, run)
	if err != nil || fleet == nil {
		return err
	}
	if err := r.refreshForeign(ctx, rs); err != nil {
		return err
	}
	rs.mu.Lock()
	finished, released := rs.receipt != nil, slices.Clone(rs.released)
	rs.mu.Unlock()
	if !finished {
		return nil
	}
	_, err = r.releaseNodes(ctx, fleet, rs, released)
	return err
}

// claim records fr as a firing not admitted yet and holds its nodes for
// its run, so that no request takes them first. A node another run holds
// already makes the firing's admission wait.
func (r *Reconciler) claim(fr *firedRun) {
	r.mu.Lock()
	_, known := r.runs[fr.firing.Run]
	if _, ok := r.finished[fr.firing.Run]; ok || known {
		r.mu.Unlock()
		return
	}
	r.fired[fr.firing.Run] = fr
	r.mu.Unlock()
	if err := r.holds.reserve(fr.firing.Run, fr.firing.Nodes()); err != nil {
		r.log.Warn("a fired run's nodes are held by another run; its admission waits", "run", fr.firing.Run, "error", err)
	}
}

// errAdmittedElsewhere: a fired run's admission was recorded by another
// writer first; the reservation under the same run ID is that writer's.
var errAdmittedElsewhere = errors.New("the fired run was admitted by another writer")

// firedOf returns the fired runs of standing certification name without
// admission, in sequence order.
func (r *Reconciler) firedOf(name string) []*firedRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*firedRun
	for _, fr := range r.fired {
		if fr.firing.Standing.Name == name {
			out = append(out, fr)
		}
	}
	slices.SortFunc(out, func(a, b *firedRun) int { return int(a.firing.Sequence - b.firing.Sequence) })
	return out
}

// loadFirings makes the firings 1 … seq-1 of standing certification name
// known (loadFiring); those already known cost a map lookup.
func (r *Reconciler) loadFirings(ctx context.Context, name string, seq int64) error {
	for s := int64(1); s < seq; s++ {
		if err := r.loadFiring(ctx, specs.FiringRunID(name, s)); err != nil {
			return fmt.Errorf("standing certification %s: %w", name, err)
		}
	}
	return nil
}

// loadFiring makes run, a firing on the evidence branch, known: its run
// when admitted (loadRun), its firing otherwise.
func (r *Reconciler) loadFiring(ctx context.Context, run string) error {
	r.mu.Lock()
	_, known := r.runs[run]
	_, finished := r.finished[run]
	_, fired := r.fired[run]
	r.mu.Unlock()
	if known || finished || fired {
		return nil
	}
	_, err := r.loadForeign(ctx, run)
	var fo *firedOnlyError
	if errors.As(err, &fo) {
		r.claim(fo.fired)
		return nil
	}
	return err
}

// loadForeign is loadRun for a run another reconciler may be driving: an
// unfinished one is kept in r.runs too (loadRun leaves that to its
// caller), so that its nodes count as held until its receipt lands
// (refreshForeign).
func (r *Reconciler) loadForeign(ctx context.Context, run string) (*runState, error) {
	rs, err := r.loadRun(ctx, run)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.runs[run]; ok {
		return cur, nil
	}
	r.runs[run] = rs
	return rs, nil
}

// firedOnlyError is loadRun's answer for a run directory that holds a
// firing record and no admission yet.
type firedOnlyError struct{ fired *firedRun }

func (e *firedOnlyError) Error() string {
	return fmt.Sprintf("run %s is fired and not admitted", e.fired.firing.Run)
}

// loadFired reads the firing record in dir when there is one: a
// *firedOnlyError for loadRun to return, or nil when dir has none.
func (r *Reconciler) loadFired(ctx context.Context, id, dir string) error {
	fp := path.Join(dir, evidence.FiringFile)
	b, err := r.store.Read(ctx, fp)
	if errors.Is(err, evidence.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var fr evidence.Firing
	if err := r.readOwn(b, evidence.PredicateFiring, &fr); err != nil {
		return fmt.Errorf("%s: %w", fp, err)
	}
	if fr.Run != id || fr.Cluster != r.cfg.Cluster {
		return fmt.Errorf("%s: firing names run %q of cluster %q", fp, fr.Run, fr.Cluster)
	}
	return &firedOnlyError{fired: &firedRun{ref: evidence.FileRef{Path: fp, Digest: specs.DigestOf(b)}, firing: fr}}
}
