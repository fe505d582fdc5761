package audit

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

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
	if fr.Standing.Kind != specs.KindStanding || specs.FiringRunID(fr.Standing.Name, fr.Sequence) != r.id {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("firing %d of %s is not run %s", fr.Sequence, fr.Standing.Subject(), r.id))
	}
	if c, err := specs.CanonicalStanding(&fr.StandingObject); err == nil {
		r.bindValue(rel, "standingObject", fr.Standing.Digest, specs.DigestOf(c))
	} else {
		r.add(RuleDigestBinding, rel, "standingObject: "+err.Error())
	}
	r.subjectsMatch(rel, r.firFile, []signing.Subject{signing.SubjectFor(fr.Standing.Subject(), fr.Standing.Digest)})
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
