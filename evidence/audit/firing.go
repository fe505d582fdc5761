package audit

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// checkFiring audits firing.json, when the run directory holds one: a
// document signed by an evidence signer (verified with every document),
// about this run, in the directory dated by its firing time, whose run is
// the standing certification's firing of its sequence number, whose copy
// of the standing certification digests to the digest it names, and whose
// standing certification digest is approved at the firing time by the
// approval copies it binds (rule firing-unapproved otherwise).
func (r *runAudit) checkFiring() {
	r.firFile = r.file(evidence.FiringFile)
	if r.firFile == nil {
		return
	}
	const rel = evidence.FiringFile
	var fr evidence.Firing
	if !r.decode(rel, r.firFile, evidence.PredicateFiring, &fr) {
		return
	}
	r.fired = true
	r.present = append(r.present, evidence.KindFiring)
	r.report.FiredAt = fr.FiredAt
	if !r.sameRun(rel, fr.Run, fr.Cluster) {
		return
	}
	r.firing = &fr
	if want := evidence.RunDir(r.cluster, r.id, fr.FiredAt); want != r.dir {
		r.add(RuleLayout, rel, fmt.Sprintf("fired at %s, so the run belongs in %s", fr.FiredAt.UTC().Format(time.RFC3339), want))
	}
	if fr.Standing.Kind != specs.KindStanding || fr.StandingObject.Metadata.Name != fr.Standing.Name || specs.FiringRunID(fr.Standing.Name, fr.Sequence) != r.id {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("firing %d of %s (a copy of %q) is not run %s", fr.Sequence, fr.Standing.Subject(), fr.StandingObject.Metadata.Name, r.id))
	}
	if c, err := specs.CanonicalStanding(&fr.StandingObject); err == nil {
		r.bindValue(rel, "standingObject", fr.Standing.Digest, specs.DigestOf(c))
	} else {
		r.add(RuleDigestBinding, rel, "standingObject: "+err.Error())
	}
	r.subjectsMatch(rel, r.firFile, []signing.Subject{signing.SubjectFor(fr.Standing.Subject(), fr.Standing.Digest)})
	r.checkFiringTip(&fr)
	r.checkFiringBudget(&fr)
	r.checkFiringReasons(&fr)
	approvals := r.approvals(rel, fr.Approvals)
	d := r.a.policy.Decide(fr.Standing.Subject(), fr.Standing.Digest, approvals, r.cluster, fr.FiredAt)
	if !d.Approved {
		r.add(RuleFiringUnapproved, rel, fmt.Sprintf("%s (%s) is not approved at the firing time %s by the copied approvals under the trust policy: %s",
			d.Subject, d.Digest, fr.FiredAt.UTC().Format(time.RFC3339), strings.Join(d.Reasons, "; ")))
		return
	}
	r.decided(rel, d)
}

// checkFiredOnly audits a run directory that holds a firing and no
// admission: nothing but the firing (and what it binds) may be there, and
// the firing may wait for its admission FiringAdmissionBound plus the
// audit's grace (rule incomplete-run after that, as for an admitted run
// without receipt past its deadline).
func (r *runAudit) checkFiredOnly() {
	for rel, f := range r.files {
		if rel != evidence.FiringFile && f.doc != nil && f.doc.kind == kindDocument {
			r.add(RuleLifecycleOrder, rel, "the run directory has a firing record and no admission.json: every document of a run but its firing follows its admission")
		}
	}
	if r.firing == nil {
		return
	}
	for _, c := range r.firing.Chosen {
		r.report.Nodes = append(r.report.Nodes, NodeReport{Node: c.Node, UID: c.UID})
	}
	if bound := r.firing.FiredAt.Add(evidence.FiringAdmissionBound + r.a.opts.Grace); r.a.opts.Now.After(bound) {
		r.add(RuleIncompleteRun, evidence.FiringFile, fmt.Sprintf("fired at %s and not admitted at %s (admission bound %s, grace %s)",
			r.firing.FiredAt.UTC().Format(time.RFC3339), r.a.opts.Now.UTC().Format(time.RFC3339), evidence.FiringAdmissionBound, r.a.opts.Grace))
	}
}

// checkFiringAdmission holds the admission of a run with a firing record to
// it (rule firing-admission): the admission names the firing.json of its
// run directory, by its digest (rule digest-binding), lands after it, and
// admits exactly the firing's chosen nodes, by name and UID. An admission
// that names a firing needs one; a run with a firing needs its admission
// to name it.
func (r *runAudit) checkFiringAdmission() {
	adm := r.adm
	const rel = evidence.AdmissionFile
	switch {
	case adm.Firing == nil && r.firFile == nil:
		return
	case adm.Firing == nil:
		r.add(RuleFiringAdmission, rel, "the run has a firing record, but its admission does not name it")
		return
	}
	if want := path.Join(r.dir, evidence.FiringFile); adm.Firing.Path != want {
		r.add(RuleFiringAdmission, rel, fmt.Sprintf("firing.path %s is not the run's firing record %s", adm.Firing.Path, want))
		return
	}
	f := r.bind(rel, adm.Firing.Path, adm.Firing.Digest)
	if f == nil || r.firing == nil {
		return
	}
	r.notBefore(rel, r.admFile, evidence.FiringFile, f)
	var chosen, admitted []string
	for _, c := range r.firing.Chosen {
		chosen = append(chosen, c.Node+" (uid "+c.UID+")")
	}
	for _, p := range adm.Participants {
		admitted = append(admitted, p.Node+" (uid "+p.UID+")")
	}
	slices.Sort(chosen)
	slices.Sort(admitted)
	if !slices.Equal(chosen, admitted) {
		r.add(RuleFiringAdmission, rel, fmt.Sprintf("admits %s, but the firing chose %s", strings.Join(admitted, ", "), strings.Join(chosen, ", ")))
	}
}

// checkFiringTip: the firing landed as a child of the tip it was decided
// from (rule firing-tip): the store appends a firing only by strict
// compare-and-swap on that tip, so a firing on another parent was decided
// on a branch that had moved, and its budget and due reasons are unproven.
func (r *runAudit) checkFiringTip(fr *evidence.Firing) {
	parent := r.a.parentOf(r.firFile.landed)
	if parent.String() == fr.Tip || parent.IsZero() && fr.Tip == "" {
		return
	}
	r.add(RuleFiringTip, evidence.FiringFile, fmt.Sprintf("decided from tip %q, but landed in commit %s on %s: a firing is appended only as a child of the tip it was decided from",
		fr.Tip, shortHash(r.firFile.landed.hash.String()), parent))
}

// parentOf is the first parent of first-parent commit c, zero for the
// first commit of the branch.
func (a *auditor) parentOf(c *commitInfo) plumbing.Hash {
	switch i := c.index - 1; {
	case i < 0:
		return a.older // zero unless only a run directory's history was read
	case i < a.baseLen:
		return a.pastCommit(i).hash
	default:
		return a.commits[i-a.baseLen].hash
	}
}

// checkFiringBudget holds a firing to its own arithmetic (rule
// budget-exceeded): every in-use and chosen node is a pool node (chosen
// ones with the pool's UID), no node is chosen twice or both in use and
// chosen, and in use plus chosen is at most the standing certification's
// budget for the recorded pool size. That the recorded in-use nodes
// include those the branch held at the firing's tip is
// checkFiringHistory's.
func (r *runAudit) checkFiringBudget(fr *evidence.Firing) {
	const rel = evidence.FiringFile
	pool := map[string]string{}
	for _, p := range fr.Pool {
		pool[p.Node] = p.UID
	}
	taken := map[string]bool{}
	for _, n := range fr.InUse {
		if _, ok := pool[n]; !ok || taken[n] {
			r.add(RuleBudgetExceeded, rel, fmt.Sprintf("in-use node %q is not a pool node or is listed twice", n))
		}
		taken[n] = true
	}
	for _, c := range fr.Chosen {
		if uid, ok := pool[c.Node]; !ok || uid != c.UID || taken[c.Node] {
			r.add(RuleBudgetExceeded, rel, fmt.Sprintf("chosen node %q (uid %q) is not a pool node with that UID, or is already in use or chosen: the budget does not count it", c.Node, c.UID))
		}
		taken[c.Node] = true
	}
	allowed := fr.StandingObject.Spec.Budget.Nodes(len(fr.Pool))
	if len(fr.InUse)+len(fr.Chosen) > allowed {
		r.add(RuleBudgetExceeded, rel, fmt.Sprintf("%d nodes in use and %d chosen, but the budget allows %d of a pool of %d", len(fr.InUse), len(fr.Chosen), allowed, len(fr.Pool)))
	}
}

// checkFiringSequences: the firings of each standing certification of a
// cluster are numbered 1, 2, … without a gap, each landing in a later
// commit than the one before it (rule firing-sequence). The writer appends
// firing n+1 only on a tip that holds firing n (NextFiringSequence,
// AppendFiring), so a gap or a firing out of order was not written by that
// protocol. It reads only which run directories hold a firing.json and
// where it landed, which a checkpoint keeps.
func (a *auditor) checkFiringSequences(runs map[string]*runAudit) {
	type standing struct{ cluster, name string }
	firings := map[standing]map[int64]*runAudit{}
	var fired []*runAudit
	for _, r := range runs {
		i := strings.LastIndexByte(r.id, '-')
		if r.firFile == nil || i <= 0 {
			continue
		}
		seq, ok := specs.FiringSequence(r.id[:i], r.id)
		if !ok {
			continue // checkFiring reports a firing that is not its run's
		}
		k := standing{r.cluster, r.id[:i]}
		if firings[k] == nil {
			firings[k] = map[int64]*runAudit{}
		}
		firings[k][seq] = r
		fired = append(fired, r)
	}
	sort.Slice(fired, func(i, j int) bool { return fired[i].dir < fired[j].dir })
	for _, r := range fired {
		i := strings.LastIndexByte(r.id, '-')
		name := r.id[:i]
		seq, _ := specs.FiringSequence(name, r.id)
		if seq == 1 || r.ref {
			continue
		}
		f := r.firFile
		fail := func(msg string) {
			a.add(Finding{Rule: RuleFiringSequence, Cluster: r.cluster, Run: r.id, Path: path.Join(r.dir, evidence.FiringFile), Commit: f.landed.hash.String(), Message: msg})
		}
		prev := firings[standing{r.cluster, name}][seq-1]
		switch {
		case prev == nil:
			fail(fmt.Sprintf("firing %d of %s in cluster %s, but there is no firing %d: firings are numbered without a gap", seq, name, r.cluster, seq-1))
		case f.landed.index <= prev.firFile.landed.index:
			fail(fmt.Sprintf("landed in commit %s, not after firing %d (%s): a firing is appended only on a tip holding the one before",
				shortHash(f.landed.hash.String()), seq-1, shortHash(prev.firFile.landed.hash.String())))
		}
	}
}

// checkFiringReasons holds each chosen node's due reason to the standing
// certification it fired (rule firing-trigger-unproven, reasonProblem).
// That the history before the firing shows the reason is
// checkFiringHistory's: it needs the other runs' documents.
func (r *runAudit) checkFiringReasons(fr *evidence.Firing) {
	for i := range fr.Chosen {
		if msg := reasonProblem(fr, i, r.id); msg != "" {
			r.add(RuleFiringTriggerUnproven, evidence.FiringFile, msg)
		}
	}
}

// reasonProblem says what is wrong with chosen node i's due reason in
// firing fr of run, as Decide gives reasons, "" when nothing: joined
// needs the joined trigger or every, and names no run; schedule needs
// every, expiry beforeExpiry, identity and expired their triggers, and
// each of these names the earlier run it refers to (not this one).
func reasonProblem(fr *evidence.Firing, i int, run string) string {
	spec := fr.StandingObject.Spec
	enabled := map[string]bool{
		evidence.DueJoined:   slices.Contains(spec.Triggers, specs.TriggerJoined) || spec.Every != "",
		evidence.DueSchedule: spec.Every != "",
		evidence.DueExpiry:   spec.BeforeExpiry != "",
		evidence.DueIdentity: slices.Contains(spec.Triggers, specs.TriggerIdentity),
		evidence.DueExpired:  slices.Contains(spec.Triggers, specs.TriggerExpired),
		evidence.DueFailed:   true,
	}
	c := fr.Chosen[i]
	k := c.Reason.Kind
	switch {
	case !enabled[k]:
		return fmt.Sprintf("chosen[%d] %s: due reason %q is not one %s fires on", i, c.Node, k, fr.Standing.Subject())
	case (k == evidence.DueJoined) != (c.Reason.Run == ""):
		return fmt.Sprintf("chosen[%d] %s: due reason %q names run %q: joined names none, every other reason the earlier run it refers to", i, c.Node, k, c.Reason.Run)
	case c.Reason.Run == run:
		return fmt.Sprintf("chosen[%d] %s: due reason %q refers to this run itself", i, c.Node, k)
	}
	return ""
}
