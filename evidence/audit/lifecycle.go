package audit

import (
	"bytes"
	"encoding/json"
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

func (r *runAudit) checkAdmission() {
	adm := r.adm
	const rel = evidence.AdmissionFile
	if !r.sameRun(rel, adm.Run, adm.Cluster) {
		return
	}
	if adm.Firing != nil || r.firFile != nil {
		// A fired run's directory is dated by its firing (checkFiring).
		r.checkFiringAdmission()
	} else if want := evidence.RunDir(r.cluster, r.id, adm.AdmittedAt); want != r.dir {
		r.add(RuleLayout, rel, fmt.Sprintf("admitted at %s, so the run belongs in %s", adm.AdmittedAt.UTC().Format(time.RFC3339), want))
	}
	if adm.Request.Kind != specs.KindRequest || adm.Request.Name != r.id {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("request %s is not %s", adm.Request.Subject(), specs.SubjectName(specs.KindRequest, r.id, "")))
	}
	if adm.Profile.Kind != specs.KindProfile || adm.Profile.Name != adm.RequestObject.Spec.Profile {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("profile %s is not the request's profile %q", adm.Profile.Subject(), adm.RequestObject.Spec.Profile))
	}
	if c, err := specs.CanonicalRequest(&adm.RequestObject); err == nil {
		r.bindValue(rel, "requestObject", adm.Request.Digest, specs.DigestOf(c))
	} else {
		r.add(RuleDigestBinding, rel, "requestObject: "+err.Error())
	}
	if c, err := specs.CanonicalProfile(&adm.ProfileObject); err == nil {
		r.bindValue(rel, "profileObject", adm.Profile.Digest, specs.DigestOf(c))
	} else {
		r.add(RuleDigestBinding, rel, "profileObject: "+err.Error())
	}
	r.bindValue(rel, "bundle", specs.Digest(adm.ProfileObject.Spec.Bundle.Digest), adm.Bundle.Digest)
	r.checkBundleListing(rel, adm.Bundle)
	if want := adm.AdmittedAt.Add(adm.ProfileObject.RunDeadline()); !adm.RunDeadline.Equal(want) {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("runDeadline %s is not admittedAt plus the profile's derived run deadline (%s)", adm.RunDeadline.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339)))
	}
	subjects := []signing.Subject{signing.SubjectFor(adm.Request.Subject(), adm.Request.Digest)}
	seen := map[string]bool{}
	for i, p := range adm.Participants {
		if p.Index != i || seen[p.Node] {
			r.add(RuleDigestBinding, rel, fmt.Sprintf("participants[%d]: index %d or node %q repeated", i, p.Index, p.Node))
		}
		seen[p.Node] = true
		r.report.Nodes = append(r.report.Nodes, NodeReport{Node: p.Node, UID: p.UID})
		if want := evidence.NodePath(r.dir, p.Node); p.Snapshot.Path != want {
			r.add(RuleDigestBinding, rel, fmt.Sprintf("participants[%d].snapshot.path %s is not %s", i, p.Snapshot.Path, want))
		}
		r.subjects = append(r.subjects, signing.SubjectFor(p.Snapshot.Path, p.Snapshot.Digest))
		f := r.bind(rel, p.Snapshot.Path, p.Snapshot.Digest)
		if f == nil {
			continue
		}
		var snap evidence.NodeSnapshot
		srel, _ := r.rel(p.Snapshot.Path)
		if err := signing.StrictUnmarshal(f.data, &snap); err != nil {
			r.add(RuleLayout, srel, "node snapshot does not decode: "+err.Error())
			continue
		}
		if r.sameRun(srel, snap.Run, snap.Cluster) {
			if snap.Name != p.Node || snap.UID != p.UID {
				r.add(RuleDigestBinding, srel, fmt.Sprintf("snapshot of node %q (uid %q), admitted as %q (uid %q)", snap.Name, snap.UID, p.Node, p.UID))
			} else {
				r.snapshots[p.Node] = &snap
			}
		}
		r.notBefore(rel, r.admFile, srel, f)
	}
	if len(adm.Participants) == 0 {
		r.add(RuleDigestBinding, rel, "no participant")
	}
	r.subjectsMatch(rel, r.admFile, append(subjects, r.subjects...))
	approvals := r.approvals(rel, adm.Approvals)
	approve := []evidence.ObjectRef{adm.Request, adm.Profile}
	if r.firFile != nil {
		// A fired run's request is derived from its firing, whose
		// approvals of the standing certification stand for it; it must
		// be exactly that derivation.
		approve = approve[1:]
		r.checkFiringRequest()
	}
	for _, o := range approve {
		d := r.a.policy.Decide(o.Subject(), o.Digest, approvals, r.cluster, adm.AdmittedAt)
		r.decided(rel, d)
	}
}

// checkFiringRequest holds a fired run's admitted request to the one its
// firing derives (evidence.FiringRequest: the run's name, the standing
// certification's profile, the chosen nodes in order), rule
// firing-admission; a firing that did not decode proves no request.
func (r *runAudit) checkFiringRequest() {
	const rel = evidence.AdmissionFile
	if r.firing == nil {
		r.add(RuleFiringAdmission, rel, "the run's firing record does not prove its request")
		return
	}
	want := evidence.FiringRequest(r.firing)
	c, err := specs.CanonicalRequest(&want)
	if err != nil {
		r.add(RuleFiringAdmission, rel, "the firing's request: "+err.Error())
		return
	}
	if d := specs.DigestOf(c); r.adm.Request.Digest != d {
		r.add(RuleFiringAdmission, rel, fmt.Sprintf("request %s is not the request the firing derives (%s: profile %s, nodes %s)",
			r.adm.Request.Digest, d, want.Spec.Profile, strings.Join(want.Spec.Nodes, ", ")))
	}
}

// checkBundleListing recomputes the aggregate digest from the file list
// the admission records: the script digests check intents are held to
// come from that list, so it must be the approved bundle's listing.
func (r *runAudit) checkBundleListing(rel string, b evidence.BundleRecord) {
	files := make([]specs.BundleFile, len(b.Files))
	for i, f := range b.Files {
		files[i] = specs.BundleFile{Path: f.Path, Digest: f.Digest}
	}
	agg, err := specs.BundleListingDigest(files)
	switch {
	case err != nil:
		r.add(RuleBundleDigest, rel, "bundle.files: "+err.Error())
	case agg != b.Digest:
		r.add(RuleBundleDigest, rel, fmt.Sprintf("bundle.files hash to %s, not to the bundle digest %s", agg, b.Digest))
	}
}

// approvals binds and parses the approval copies refs.
func (r *runAudit) approvals(rel string, refs []evidence.FileRef) []*signing.Approval {
	var out []*signing.Approval
	for _, ref := range refs {
		f := r.bind(rel, ref.Path, ref.Digest)
		if f == nil || f.doc == nil || f.doc.approval == nil {
			continue
		}
		if rp, _ := evidence.ParsePath(ref.Path); rp.Kind != evidence.KindApproval {
			r.add(RuleLayout, rel, fmt.Sprintf("approval copy %s is not under approvals/", ref.Path))
		}
		arel, _ := r.rel(ref.Path)
		r.notBefore(rel, r.files[rel], arel, f)
		out = append(out, f.doc.approval)
	}
	return out
}

func (r *runAudit) decided(rel string, d signing.Decision) {
	if !d.Approved {
		r.add(RuleApproval, rel, fmt.Sprintf("%s (%s) is not approved by the copied approvals under the trust policy: %s", d.Subject, d.Digest, strings.Join(d.Reasons, "; ")))
		return
	}
	for _, k := range d.Keys {
		r.approver[k] = true
		if !slices.Contains(r.approvedBy[rel], k) {
			r.approvedBy[rel] = append(r.approvedBy[rel], k)
		}
	}
}

func (r *runAudit) checkChecks() {
	prof := r.adm.ProfileObject.Spec.Checks
	for rel := range r.files {
		if !strings.HasPrefix(rel, "checks/") {
			continue
		}
		rp, _ := evidence.ParsePath(path.Join(r.dir, rel))
		if rp.Kind != evidence.KindCheck && rp.Kind != evidence.KindCheckIntent {
			r.add(RuleLayout, rel, "not checks/NN-<check>.json or checks/NN-<check>.intent.json")
			continue
		}
		if i := rp.Index; i >= len(prof) || prof[i].Name != rp.Check {
			r.add(RuleLayout, rel, fmt.Sprintf("the admitted profile has no check %q at index %d", rp.Check, i))
		}
	}
	var prevEv *fileRec
	prevRel := ""
	r.checks = make([]*evidence.CheckEvidence, len(prof))
	r.intents = make([]*evidence.CheckIntent, len(prof))
	for i, ck := range prof {
		cr := CheckReport{Index: i, Name: ck.Name}
		irel := strings.TrimPrefix(evidence.CheckIntentPath(r.dir, i, ck.Name), r.dir+"/")
		erel := strings.TrimPrefix(evidence.CheckPath(r.dir, i, ck.Name), r.dir+"/")
		intentF, evF := r.file(irel), r.file(erel)
		cr.Intent, cr.Evidence = intentF != nil, evF != nil
		if intentF != nil {
			r.present = append(r.present, evidence.KindCheckIntent)
			var in evidence.CheckIntent
			if r.decode(irel, intentF, evidence.PredicateCheckIntent, &in) && r.sameRun(irel, in.Run, "") {
				if in.Check != ck.Name || in.Index != i || in.Backend != string(ck.Backend) {
					r.add(RuleLayout, irel, fmt.Sprintf("intent of check %q (index %d, backend %s), but the admitted check %d is %q (backend %s)", in.Check, in.Index, in.Backend, i, ck.Name, ck.Backend))
				}
				script, _ := r.adm.ScriptDigest(ck.Script)
				r.bindValue(irel, "script "+ck.Script, in.ScriptDigest, script)
				r.subjectsMatch(irel, intentF, r.subjects)
				r.intents[i] = &in
			}
			r.notBefore(irel, intentF, evidence.AdmissionFile, r.admFile)
			if i > 0 && prevEv == nil {
				r.add(RuleLifecycleOrder, irel, fmt.Sprintf("intent of check %d without the evidence of check %d", i, i-1))
			}
			r.notBefore(irel, intentF, prevRel, prevEv)
		}
		if evF != nil {
			r.present = append(r.present, evidence.KindCheck)
			var ce evidence.CheckEvidence
			if intentF == nil {
				r.add(RuleLifecycleOrder, erel, "check evidence without its intent")
			}
			r.notBefore(erel, evF, irel, intentF)
			if r.decode(erel, evF, evidence.PredicateCheck, &ce) && r.sameRun(erel, ce.Run, "") {
				r.checks[i] = &ce
				cr.Verdict, cr.Reason = ce.Verdict, ce.Reason
				if ce.Check != ck.Name || ce.Index != i {
					r.add(RuleLayout, erel, fmt.Sprintf("evidence of check %q (index %d), but the admitted check %d is %q", ce.Check, ce.Index, i, ck.Name))
				}
				if ce.Intent.Path != path.Join(r.dir, irel) {
					r.add(RuleDigestBinding, erel, fmt.Sprintf("binds intent %s, not %s", ce.Intent.Path, path.Join(r.dir, irel)))
				}
				r.bind(erel, ce.Intent.Path, ce.Intent.Digest)
				r.subjectsMatch(erel, evF, r.subjects)
				allPass := len(ce.Participants) > 0
				for _, po := range ce.Participants {
					if !slices.ContainsFunc(r.adm.Participants, func(p evidence.Participant) bool { return p.Node == po.Node }) {
						r.add(RuleDigestBinding, erel, fmt.Sprintf("outcome for node %q, which is not a participant", po.Node))
					}
					cr.Participants = append(cr.Participants, NodeReport{Node: po.Node, UID: po.Identity.NodeUID, Verdict: po.Verdict, Reason: po.Reason})
					allPass = allPass && po.Verdict == specs.VerdictPass
					for _, l := range po.Logs {
						if lp, _ := evidence.ParsePath(l.Path); lp.Kind != evidence.KindLog || lp.Index != i || lp.Check != ck.Name {
							r.add(RuleLayout, erel, fmt.Sprintf("log %s is not a log of check %02d-%s", l.Path, i, ck.Name))
						}
						if lf := r.bind(erel, l.Path, l.Digest); lf != nil {
							lrel, _ := r.rel(l.Path)
							r.notBefore(erel, evF, lrel, lf)
						}
					}
				}
				if ce.Verdict == specs.VerdictPass && (!ce.Covered || !allPass || len(ce.Participants) != len(r.adm.Participants)) {
					r.add(RuleVerdict, erel, "Pass without every participant covered and passing")
				}
			}
			prevEv, prevRel = evF, erel
		} else if intentF != nil {
			prevEv, prevRel = nil, ""
		}
		if evF == nil && intentF == nil {
			// A check that never started: the previous evidence still
			// orders any later intent.
			cr.Skipped = true
		}
		r.report.Checks = append(r.report.Checks, cr)
	}
}

func (r *runAudit) checkEvidence() {
	const rel = evidence.EvidenceFile
	r.evFile = r.file(rel)
	if r.evFile == nil {
		return
	}
	var ev evidence.RunEvidence
	r.notBefore(rel, r.evFile, evidence.AdmissionFile, r.admFile)
	if !r.decode(rel, r.evFile, evidence.PredicateEvidence, &ev) || !r.sameRun(rel, ev.Run, ev.Cluster) {
		return
	}
	r.ev = &ev
	r.present = append(r.present, evidence.KindEvidence)
	r.report.Verdict, r.report.Canceled, r.report.EndedAt = ev.Verdict, ev.Canceled, ev.EndedAt
	if ev.Admission.Path != path.Join(r.dir, evidence.AdmissionFile) {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("binds admission %s, not this run's", ev.Admission.Path))
	}
	r.bind(rel, ev.Admission.Path, ev.Admission.Digest)
	r.subjectsMatch(rel, r.evFile, r.subjects)
	prof := r.adm.ProfileObject.Spec.Checks
	for i, s := range ev.Checks {
		if i >= len(prof) || s.Index != i || s.Check != prof[i].Name {
			continue // not the admitted check: checkSummary says so
		}
		erel := strings.TrimPrefix(evidence.CheckPath(r.dir, i, s.Check), r.dir+"/")
		irel := strings.TrimPrefix(evidence.CheckIntentPath(r.dir, i, s.Check), r.dir+"/")
		r.notBefore(rel, r.evFile, irel, r.file(irel))
		if i < len(r.report.Checks) {
			r.report.Checks[i].Verdict, r.report.Checks[i].Skipped = s.Verdict, s.Skipped
		}
		if s.Skipped {
			if f := r.file(irel); f != nil && f.landed.index <= r.evFile.landed.index {
				r.add(RuleVerdict, rel, fmt.Sprintf("check %s recorded as skipped, but its intent is on the branch", s.Check))
			}
			continue
		}
		if s.Evidence == nil {
			r.add(RuleDigestBinding, rel, fmt.Sprintf("check %s is neither skipped nor bound to its evidence", s.Check))
			continue
		}
		if s.Evidence.Path != path.Join(r.dir, erel) {
			r.add(RuleDigestBinding, rel, fmt.Sprintf("binds %s as the evidence of check %s", s.Evidence.Path, s.Check))
		}
		if f := r.bind(rel, s.Evidence.Path, s.Evidence.Digest); f != nil {
			r.notBefore(rel, r.evFile, erel, f)
		} else if r.file(erel) == nil {
			r.add(RuleLifecycleOrder, rel, fmt.Sprintf("run evidence without the evidence of check %s", s.Check))
		}
	}
	for _, n := range ev.Nodes {
		if i := slices.IndexFunc(r.report.Nodes, func(x NodeReport) bool { return x.Node == n.Node }); i >= 0 {
			r.report.Nodes[i].Verdict = n.Verdict
		}
	}
	r.checkSummary(&ev)
}

// checkSummary requires the run evidence to be exactly what Summarize
// makes of the check documents that landed before it, and of whether a
// cancel did (RuleRunSummary): the writer's own function, not a second
// derivation. It is silent when one of those check documents did not
// verify or decode: that is reported on its own.
func (r *runAudit) checkSummary(ev *evidence.RunEvidence) {
	prof := r.adm.ProfileObject.Spec.Checks
	docs := make([]*evidence.CheckDoc, len(prof))
	for i, ck := range prof {
		p := evidence.CheckPath(r.dir, i, ck.Name)
		f := r.file(strings.TrimPrefix(p, r.dir+"/"))
		if f == nil || f.landed.index > r.evFile.landed.index {
			continue
		}
		if r.checks[i] == nil {
			return
		}
		docs[i] = &evidence.CheckDoc{File: evidence.FileRef{Path: p, Digest: f.digest}, Evidence: *r.checks[i]}
	}
	cancel := r.file(evidence.CancelFile)
	want := evidence.Summarize(r.adm, docs, cancel != nil && cancel.landed.index <= r.evFile.landed.index)
	want.Admission, want.EndedAt = ev.Admission, ev.EndedAt
	if diff := summaryDiff(*ev, want); len(diff) > 0 {
		r.add(RuleRunSummary, evidence.EvidenceFile, "not the summary of the run's check documents: "+strings.Join(diff, "; "))
	}
}

// summaryDiff lists how got differs from want, field by field.
func summaryDiff(got, want evidence.RunEvidence) []string {
	var out []string
	field := func(name string, g, w any) {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if !bytes.Equal(gb, wb) {
			out = append(out, fmt.Sprintf("%s is %s, want %s", name, gb, wb))
		}
	}
	field("run", got.Run, want.Run)
	field("cluster", got.Cluster, want.Cluster)
	field("verdict", got.Verdict, want.Verdict)
	field("canceled", got.Canceled, want.Canceled)
	field("covered", got.Covered, want.Covered)
	for i := range max(len(got.Checks), len(want.Checks)) {
		field(fmt.Sprintf("checks[%d]", i), at(got.Checks, i), at(want.Checks, i))
	}
	for i := range max(len(got.Nodes), len(want.Nodes)) {
		field(fmt.Sprintf("nodes[%d]", i), at(got.Nodes, i), at(want.Nodes, i))
	}
	return out
}

// at is s[i], nil past its end.
func at[T any](s []T, i int) *T {
	if i < len(s) {
		return &s[i]
	}
	return nil
}

// actionSubject returns the approval subject and digest an action of the
// run needs, and holds what the action says it acts on to the run: a
// request's run is canceled or released by its request's actions
// (CertificationRequest/<run>#<action>, the admitted digest); a fired
// run is released by its standing certification's release of that firing
// (StandingCertification/<name>#release:<run>, on the standing
// certification's digest when the release was approved, which the action
// records), and never canceled.
func (r *runAudit) actionSubject(rel string, act *evidence.Action, action string) (string, specs.Digest) {
	if r.firFile == nil {
		if act.Request != r.adm.Request {
			r.add(RuleDigestBinding, rel, fmt.Sprintf("acts on %s %s, the run admitted %s", act.Request.Subject(), act.Request.Digest, r.adm.Request.Digest))
		}
		return signing.SubjectName(specs.KindRequest, r.id, action), r.adm.Request.Digest
	}
	name := ""
	if r.firing != nil {
		name = r.firing.Standing.Name
	}
	if action != signing.ActionRelease || act.Request.Kind != specs.KindStanding || act.Request.Name != name {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("%s acts on %s, but a fired run is only released, by its standing certification %s", action, act.Request.Subject(), specs.SubjectName(specs.KindStanding, name, "")))
	}
	return signing.SubjectName(specs.KindStanding, name, specs.StandingReleaseAction(r.id)), act.Request.Digest
}

func (r *runAudit) checkAction(rel, predicate, action string) {
	f := r.file(rel)
	if f == nil {
		return
	}
	r.notBefore(rel, f, evidence.AdmissionFile, r.admFile)
	var act evidence.Action
	if !r.decode(rel, f, predicate, &act) || !r.sameRun(rel, act.Run, "") {
		return
	}
	if act.Action != action {
		r.add(RulePredicate, rel, fmt.Sprintf("action %q in %s", act.Action, rel))
	}
	r.actions[rel] = &act
	subject, digest := r.actionSubject(rel, &act, action)
	r.subjectsMatch(rel, f, []signing.Subject{signing.SubjectFor(subject, digest)})
	approvals := r.approvals(rel, act.Approvals)
	d := r.a.policy.Decide(subject, digest, approvals, r.cluster, act.At)
	r.decided(rel, d)
	switch action {
	case signing.ActionCancel:
		if rc := r.file(evidence.ReceiptFile); rc != nil && f.landed.index > rc.landed.index {
			r.add(RuleLifecycleOrder, rel, "cancel landed after the run's receipt")
		}
	case signing.ActionRelease:
		if r.evFile == nil {
			r.add(RuleLifecycleOrder, rel, "release without run evidence")
		}
		r.notBefore(rel, f, evidence.EvidenceFile, r.evFile)
		r.report.Released = true
		r.releaseApproved = d.Approved
	}
}

func (r *runAudit) checkReceipt() {
	const rel = evidence.ReceiptFile
	r.rcFile = r.file(rel)
	if r.rcFile == nil {
		return
	}
	if r.evFile == nil {
		r.add(RuleLifecycleOrder, rel, "receipt without run evidence")
	}
	r.notBefore(rel, r.rcFile, evidence.EvidenceFile, r.evFile)
	var rc evidence.Receipt
	if !r.decode(rel, r.rcFile, evidence.PredicateReceipt, &rc) || !r.sameRun(rel, rc.Run, rc.Cluster) {
		return
	}
	r.receipt = &rc
	r.present = append(r.present, evidence.KindReceipt)
	r.report.ReceiptSequence = rc.Sequence
	evPath := path.Join(r.dir, evidence.EvidenceFile)
	if rc.Evidence.Path != evPath {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("binds evidence %s, not %s", rc.Evidence.Path, evPath))
	}
	r.bind(rel, rc.Evidence.Path, rc.Evidence.Digest)
	r.subjectsMatch(rel, r.rcFile, []signing.Subject{signing.SubjectFor(rc.Evidence.Path, rc.Evidence.Digest)})
	if r.ev != nil {
		if rc.Verdict != r.ev.Verdict {
			r.add(RuleVerdict, rel, fmt.Sprintf("verdict %s, the run evidence says %s", rc.Verdict, r.ev.Verdict))
		}
		var pass, other []string
		for _, n := range r.ev.Nodes {
			if n.Verdict == specs.VerdictPass {
				pass = append(pass, n.Node)
			} else {
				other = append(other, n.Node)
			}
		}
		sort.Strings(pass)
		sort.Strings(other)
		if !slices.Equal(pass, sortedCopy(rc.Released)) || !slices.Equal(other, sortedCopy(rc.Retained)) {
			r.add(RuleVerdict, rel, fmt.Sprintf("released %v and retained %v, but the Pass nodes are %v", rc.Released, rc.Retained, pass))
		}
		r.checkCertifiedUntil(&rc, len(pass) > 0)
	}
	ec := r.a.commitByHash(plumbing.NewHash(rc.EvidenceCommit))
	ok := ec != nil
	switch {
	case !ok || len(rc.EvidenceCommit) != 40:
		r.add(RuleDigestBinding, rel, fmt.Sprintf("evidenceCommit %q is not a commit of the branch's first-parent history", rc.EvidenceCommit))
	case r.evFile != nil && ec.index < r.evFile.landed.index:
		r.add(RuleDigestBinding, rel, fmt.Sprintf("evidenceCommit %s is before the commit where evidence.json landed (%s)", shortHash(rc.EvidenceCommit), shortHash(r.evFile.commit.hash.String())))
	case ec.index > r.rcFile.landed.index:
		r.add(RuleDigestBinding, rel, fmt.Sprintf("evidenceCommit %s is after the receipt's own commit", shortHash(rc.EvidenceCommit)))
	}
}

// checkCertifiedUntil holds the receipt's certifiedUntil to the run
// evidence (rule verdict): a run that released no node as passing
// certified none, so it records none; otherwise it is zero (labelling
// off) or after the run evidence's endedAt, which it counts from.
func (r *runAudit) checkCertifiedUntil(rc *evidence.Receipt, passed bool) {
	cu := rc.CertifiedUntil
	switch {
	case cu.IsZero():
	case !passed:
		r.add(RuleVerdict, evidence.ReceiptFile, fmt.Sprintf("certifiedUntil %s, but no node passed: the run certified none", cu.UTC().Format(time.RFC3339)))
	case !cu.After(r.ev.EndedAt):
		r.add(RuleVerdict, evidence.ReceiptFile, fmt.Sprintf("certifiedUntil %s is not after the run evidence's endedAt %s", cu.UTC().Format(time.RFC3339Nano), r.ev.EndedAt.UTC().Format(time.RFC3339Nano)))
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	if c == nil {
		c = []string{}
	}
	return c
}
