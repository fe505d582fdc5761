package evidence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// RunReport is what the branch says about one run, as audited.
type RunReport struct {
	Cluster    string        `json:"cluster"`
	Run        string        `json:"run"`
	Dir        string        `json:"dir"`
	Phase      Phase         `json:"phase"`
	Verdict    specs.Verdict `json:"verdict,omitempty"`
	Canceled   bool          `json:"canceled,omitempty"`
	Released   bool          `json:"released,omitempty"`
	Profile    string        `json:"profile,omitempty"`
	SpecCommit string        `json:"specCommit,omitempty"`
	AdmittedAt time.Time     `json:"admittedAt,omitzero"`
	Deadline   time.Time     `json:"runDeadline,omitzero"`
	EndedAt    time.Time     `json:"endedAt,omitzero"`
	// ReceiptSequence is the run's place in its cluster's receipt chain,
	// 0 without a receipt.
	ReceiptSequence int64         `json:"receiptSequence,omitempty"`
	Checks          []CheckReport `json:"checks,omitempty"`
	Nodes           []NodeReport  `json:"nodes,omitempty"`
	// Signers are the ids of the keys that signed the run's documents.
	Signers []string `json:"signers,omitempty"`
	// Approvers are the ids of the approver keys counted for the
	// admission, cancel and release.
	Approvers []string `json:"approvers,omitempty"`
	// Bindings are every digest binding checked, in document order:
	// listed by Verify (one run); Audit leaves them out, a binding that
	// fails being a finding (a branch of 10^5 runs holds millions).
	Bindings []Binding `json:"bindings,omitempty"`
	// Findings are this run's findings (also in AuditReport.Findings).
	Findings []Finding `json:"findings,omitempty"`
}

// CheckReport is one check of a run.
type CheckReport struct {
	Index        int           `json:"index"`
	Name         string        `json:"name"`
	Verdict      specs.Verdict `json:"verdict,omitempty"`
	Reason       string        `json:"reason,omitempty"`
	Skipped      bool          `json:"skipped,omitempty"`
	Intent       bool          `json:"intent"`
	Evidence     bool          `json:"evidence"`
	Participants []NodeReport  `json:"participants,omitempty"`
}

// NodeReport is one node's verdict.
type NodeReport struct {
	Node    string        `json:"node"`
	UID     string        `json:"uid,omitempty"`
	Verdict specs.Verdict `json:"verdict,omitempty"`
	Reason  string        `json:"reason,omitempty"`
}

// Binding is one digest binding from a document to a file or spec object.
type Binding struct {
	From   string       `json:"from"`
	To     string       `json:"to"`
	Digest specs.Digest `json:"digest"`
	OK     bool         `json:"ok"`
}

// runAudit is one run directory being audited.
type runAudit struct {
	a       *auditor
	cluster string
	id      string
	dir     string
	files   map[string]*fileRec // by path relative to dir
	bound   map[string]bool     // relative paths some document binds

	adm      *Admission
	admFile  *fileRec
	subjects []signing.Subject
	ev       *RunEvidence
	evFile   *fileRec
	receipt  *Receipt
	rcFile   *fileRec
	checks   []*CheckEvidence
	// present are the kinds of the run's documents that are there and
	// decode (intents and check evidence: that are there): its phase.
	present  []FileKind
	report   RunReport
	signers  map[string]bool
	approver map[string]bool
	// unverified: some document did not verify (reported on its own);
	// what only it would have bound is not reported again.
	unverified bool
	// findings of the run's own checks (check runs on several goroutines;
	// checkAll adds them in run order).
	findings []Finding
	// admitted: the admission verified and decoded (adm may since have
	// been dropped by compact).
	admitted bool
	// queued for a batch check (a receipt landed); checked once done.
	queued, checked bool
}

func newRunAudit(a *auditor, cluster, id, dir string, files map[string]*fileRec) *runAudit {
	return &runAudit{a: a, cluster: cluster, id: id, dir: dir, files: files, bound: map[string]bool{},
		signers: map[string]bool{}, approver: map[string]bool{}}
}

// compact drops what only the run's own check reads, once it is done:
// decoded documents and predicates, node snapshots, approval copies. What
// the whole-branch checks read (digests, landing commits, the receipt)
// and the report stay.
func (r *runAudit) compact() {
	vp := r.a.pool
	for _, f := range r.files {
		if f.doc != nil {
			if f.doc.kind == kindApproval {
				delete(vp.approvals, f.blob)
			}
			f.doc.statement, f.doc.approval = nil, nil
		}
		f.data = nil // in a run directory only node snapshots keep their data
	}
	r.adm, r.ev, r.checks, r.subjects, r.bound = nil, nil, nil, nil, nil
}

func (r *runAudit) add(rule, rel, msg string) {
	f := Finding{Rule: rule, Cluster: r.cluster, Run: r.id, Path: path.Join(r.dir, rel), Message: msg}
	if fr := r.files[rel]; fr != nil {
		f.Commit = fr.commit.hash.String()
	}
	if rel == "" {
		f.Path = r.dir
	}
	r.findings = append(r.findings, f)
}

func (r *runAudit) file(rel string) *fileRec { return r.files[rel] }

// rel returns p relative to the run directory, and whether p is inside it.
func (r *runAudit) rel(p string) (string, bool) {
	if !strings.HasPrefix(p, r.dir+"/") {
		return "", false
	}
	return p[len(r.dir)+1:], true
}

// decode checks that f verified, has predicate type want, and decodes its
// predicate strictly into v. Signature problems are reported once for
// every file elsewhere; decode reports predicate problems.
func (r *runAudit) decode(rel string, f *fileRec, want string, v any) bool {
	if f == nil || f.doc == nil || f.doc.statement == nil || f.doc.err != nil {
		r.unverified = true
		return false
	}
	for _, k := range f.doc.keys {
		r.signers[k] = true
	}
	st := f.doc.statement
	if st.PredicateType != want {
		r.add(RulePredicate, rel, fmt.Sprintf("predicate type %q, but %s holds %q", st.PredicateType, path.Base(rel), want))
		return false
	}
	if err := signing.StrictUnmarshal(st.Predicate, v); err != nil {
		r.add(RulePredicate, rel, fmt.Sprintf("predicate does not decode as %s: %v", want, err))
		return false
	}
	return true
}

// bind checks that the document at from binds the file at p by digest d.
// It returns the bound file, nil when missing or different.
func (r *runAudit) bind(from, p string, d specs.Digest) *fileRec {
	var b Binding
	if r.a.bindings {
		b = Binding{From: path.Join(r.dir, from), To: p, Digest: d}
		defer func() { r.report.Bindings = append(r.report.Bindings, b) }()
	}
	rel, ok := r.rel(p)
	if !ok {
		// By the path alone: runs are checked as their receipts land,
		// before the files of later runs are read.
		if rp, ok := ParsePath(p); ok && rp.InRun() {
			r.add(RuleCopiedDocument, from, fmt.Sprintf("binds %s, a file of another run's directory", p))
		} else {
			r.add(RuleDigestBinding, from, fmt.Sprintf("binds %s, which is outside the run directory", p))
		}
		return nil
	}
	r.bound[rel] = true
	f := r.files[rel]
	if f == nil {
		r.add(RuleDigestBinding, from, fmt.Sprintf("binds %s (%s), which is not on the branch", p, d))
		return nil
	}
	if f.digest != d {
		r.add(RuleDigestBinding, from, fmt.Sprintf("binds %s by %s, but the file's digest is %s", p, d, f.digest))
		return nil
	}
	b.OK = true
	return f
}

// bindValue checks a digest binding to a spec object or value.
func (r *runAudit) bindValue(from, what string, recorded, actual specs.Digest) {
	if r.a.bindings {
		r.report.Bindings = append(r.report.Bindings, Binding{From: path.Join(r.dir, from), To: what, Digest: recorded, OK: recorded == actual})
	}
	if recorded != actual {
		r.add(RuleDigestBinding, from, fmt.Sprintf("records %s as %s, but it digests to %s", what, recorded, actual))
	}
}

// subjectsMatch checks a statement's subjects against want (as a set).
func (r *runAudit) subjectsMatch(rel string, f *fileRec, want []signing.Subject) {
	got := f.doc.statement.Subject
	key := func(s signing.Subject) string { return s.Name + "@" + s.Digest["sha256"] }
	var g, w []string
	for _, s := range got {
		g = append(g, key(s))
	}
	for _, s := range want {
		w = append(w, key(s))
	}
	sort.Strings(g)
	sort.Strings(w)
	if r.a.bindings {
		for _, s := range want {
			r.report.Bindings = append(r.report.Bindings, Binding{From: path.Join(r.dir, rel), To: "subject " + s.Name, Digest: s.SubjectDigest(), OK: slices.Contains(g, key(s))})
		}
	}
	if !slices.Equal(g, w) {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("subjects %v, want %v", g, w))
	}
}

// before reports a lifecycle-order finding when doc landed before dep.
func (r *runAudit) notBefore(rel string, f *fileRec, depRel string, dep *fileRec) {
	if f == nil || dep == nil {
		return
	}
	if f.landed.index < dep.landed.index {
		r.add(RuleLifecycleOrder, rel, fmt.Sprintf("landed in commit %s, before %s (commit %s)", shortHash(f.landed.hash.String()), depRel, shortHash(dep.landed.hash.String())))
	}
}

// sameRun reports a copied document when a predicate names another run.
func (r *runAudit) sameRun(rel, run, cluster string) bool {
	if run != r.id {
		r.add(RuleCopiedDocument, rel, fmt.Sprintf("the document is about run %q, not %q: copied from another run's directory", run, r.id))
		return false
	}
	if cluster != "" && cluster != r.cluster {
		r.add(RuleCopiedDocument, rel, fmt.Sprintf("the document is about cluster %q, not %q", cluster, r.cluster))
		return false
	}
	return true
}

// checkAll runs every check that needs the whole branch read.
func (a *auditor) checkAll() {
	// Signature verdicts of every version of every signed document.
	var paths []string
	for p := range a.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		vs := a.versions[p]
		if len(vs) == 0 {
			vs = []*fileRec{a.files[p]}
		}
		for _, f := range vs {
			if f.doc != nil && f.doc.err != nil {
				a.add(Finding{Rule: f.doc.rule, Run: runOfPath(p), Path: p, Commit: f.commit.hash.String(), Message: f.doc.err.Error()})
			}
		}
	}
	// The layout. Run directories were grouped during the replay
	// (addToRun), and those with a receipt mostly checked already.
	runs := a.runsByDir
	for _, p := range paths {
		top, _, _ := strings.Cut(p, "/")
		switch top {
		case "runs":
			if rp, ok := ParsePath(p); !ok || !rp.InRun() {
				a.add(Finding{Rule: RuleLayout, Path: p, Message: "not inside a run directory runs/<cluster>/<YYYY>/<MM>/<DD>/<xx>/<run>/"})
			}
		case "ids", "chain":
		default:
			a.add(Finding{Rule: RuleLayout, Path: p, Message: "outside the evidence layout (ids/, runs/, chain/)"})
		}
	}
	// Run order is path order: a directory's files sort together.
	for _, r := range runs {
		a.runs = append(a.runs, r)
	}
	sort.Slice(a.runs, func(i, j int) bool { return a.runs[i].dir+"/" < a.runs[j].dir+"/" })
	var open []*runAudit
	for _, r := range a.runs {
		if !r.checked {
			open = append(open, r)
		}
	}
	a.checkRuns(open)
	for _, r := range a.runs {
		a.findings = append(a.findings, r.findings...)
		r.findings = nil
	}
	a.checkIndex(runs)
	a.checkCopies()
	a.checkChains()
	for _, r := range a.runs {
		r.finish()
	}
}

// checkRuns checks runs independently, on as many goroutines as the
// audit has workers.
func (a *auditor) checkRuns(runs []*runAudit) {
	next := make(chan *runAudit)
	var wg sync.WaitGroup
	for range min(max(1, a.opts.Workers), len(runs)) {
		wg.Go(func() {
			for r := range next {
				r.check()
				r.checked = true
			}
		})
	}
	for _, r := range runs {
		next <- r
	}
	close(next)
	wg.Wait()
}

// check audits one run directory.
func (r *runAudit) check() {
	r.report = RunReport{Cluster: r.cluster, Run: r.id, Dir: r.dir}
	defer func() { r.report.Phase = PhaseOf(r.present...) }()
	at, _ := ParsePath(r.dir)
	if !dnsLabelRE.MatchString(r.cluster) {
		r.add(RuleLayout, "", fmt.Sprintf("cluster %q is not a DNS label", r.cluster))
	}
	if at.Shard != Shard(r.id) {
		r.add(RuleLayout, "", fmt.Sprintf("shard %s, but run %s belongs in shard %s", at.Shard, r.id, Shard(r.id)))
	}
	r.admFile = r.file(AdmissionFile)
	var adm Admission
	if r.admFile == nil {
		r.add(RuleLifecycleOrder, "", "the run directory has no admission.json: every document of a run follows its admission")
		return
	}
	if !r.decode(AdmissionFile, r.admFile, PredicateAdmission, &adm) {
		return
	}
	r.adm, r.admitted = &adm, true
	r.present = append(r.present, KindAdmission)
	r.report.Profile = adm.Profile.Name
	r.report.SpecCommit = adm.SpecCommit
	r.report.AdmittedAt, r.report.Deadline = adm.AdmittedAt, adm.RunDeadline
	r.checkAdmission()
	r.checkChecks()
	r.checkEvidence()
	r.checkAction(CancelFile, PredicateCancel, signing.ActionCancel)
	r.checkAction(ReleaseFile, PredicateRelease, signing.ActionRelease)
	r.checkReceipt()
	if r.rcFile == nil && r.a.opts.Now.After(adm.RunDeadline.Add(r.a.opts.Grace)) {
		r.add(RuleIncompleteRun, "", fmt.Sprintf("admitted at %s with run deadline %s and no receipt at %s (grace %s)",
			adm.AdmittedAt.UTC().Format(time.RFC3339), adm.RunDeadline.UTC().Format(time.RFC3339), r.a.opts.Now.UTC().Format(time.RFC3339), r.a.opts.Grace))
	}
	// Every file of the run directory is bound by some document.
	var rels []string
	for rel := range r.files {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		if r.unverified || r.bound[rel] || r.files[rel].doc != nil && r.files[rel].doc.kind == kindDocument {
			continue
		}
		r.add(RuleLayout, rel, "no document of the run binds this file")
	}
}

func (r *runAudit) checkAdmission() {
	adm := r.adm
	const rel = AdmissionFile
	if !r.sameRun(rel, adm.Run, adm.Cluster) {
		return
	}
	if want := RunDir(r.cluster, r.id, adm.AdmittedAt); want != r.dir {
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
		if want := NodePath(r.dir, p.Node); p.Snapshot.Path != want {
			r.add(RuleDigestBinding, rel, fmt.Sprintf("participants[%d].snapshot.path %s is not %s", i, p.Snapshot.Path, want))
		}
		r.subjects = append(r.subjects, signing.SubjectFor(p.Snapshot.Path, p.Snapshot.Digest))
		f := r.bind(rel, p.Snapshot.Path, p.Snapshot.Digest)
		if f == nil {
			continue
		}
		var snap NodeSnapshot
		srel, _ := r.rel(p.Snapshot.Path)
		if err := signing.StrictUnmarshal(f.data, &snap); err != nil {
			r.add(RuleLayout, srel, "node snapshot does not decode: "+err.Error())
			continue
		}
		if r.sameRun(srel, snap.Run, snap.Cluster) && (snap.Name != p.Node || snap.UID != p.UID) {
			r.add(RuleDigestBinding, srel, fmt.Sprintf("snapshot of node %q (uid %q), admitted as %q (uid %q)", snap.Name, snap.UID, p.Node, p.UID))
		}
		r.notBefore(rel, r.admFile, srel, f)
	}
	if len(adm.Participants) == 0 {
		r.add(RuleDigestBinding, rel, "no participant")
	}
	r.subjectsMatch(rel, r.admFile, append(subjects, r.subjects...))
	approvals := r.approvals(rel, adm.Approvals)
	for _, o := range []ObjectRef{adm.Request, adm.Profile} {
		d := r.a.policy.Decide(o.Subject(), o.Digest, approvals, r.cluster, adm.AdmittedAt)
		r.decided(rel, d)
	}
}

// approvals binds and parses the approval copies refs.
func (r *runAudit) approvals(rel string, refs []FileRef) []*signing.Approval {
	var out []*signing.Approval
	for _, ref := range refs {
		f := r.bind(rel, ref.Path, ref.Digest)
		if f == nil || f.doc == nil || f.doc.approval == nil {
			continue
		}
		if rp, _ := ParsePath(ref.Path); rp.Kind != KindApproval {
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
	}
}

func (r *runAudit) checkChecks() {
	prof := r.adm.ProfileObject.Spec.Checks
	for rel := range r.files {
		if !strings.HasPrefix(rel, "checks/") {
			continue
		}
		rp, _ := ParsePath(path.Join(r.dir, rel))
		if rp.Kind != KindCheck && rp.Kind != KindCheckIntent {
			r.add(RuleLayout, rel, "not checks/NN-<check>.json or checks/NN-<check>.intent.json")
			continue
		}
		if i := rp.Index; i >= len(prof) || prof[i].Name != rp.Check {
			r.add(RuleLayout, rel, fmt.Sprintf("the admitted profile has no check %q at index %d", rp.Check, i))
		}
	}
	var prevEv *fileRec
	prevRel := ""
	r.checks = make([]*CheckEvidence, len(prof))
	for i, ck := range prof {
		cr := CheckReport{Index: i, Name: ck.Name}
		irel := strings.TrimPrefix(CheckIntentPath(r.dir, i, ck.Name), r.dir+"/")
		erel := strings.TrimPrefix(CheckPath(r.dir, i, ck.Name), r.dir+"/")
		intentF, evF := r.file(irel), r.file(erel)
		cr.Intent, cr.Evidence = intentF != nil, evF != nil
		if intentF != nil {
			r.present = append(r.present, KindCheckIntent)
			var in CheckIntent
			if r.decode(irel, intentF, PredicateCheckIntent, &in) && r.sameRun(irel, in.Run, "") {
				if in.Check != ck.Name || in.Index != i || in.Backend != string(ck.Backend) {
					r.add(RuleLayout, irel, fmt.Sprintf("intent of check %q (index %d, backend %s), but the admitted check %d is %q (backend %s)", in.Check, in.Index, in.Backend, i, ck.Name, ck.Backend))
				}
				script, _ := r.adm.ScriptDigest(ck.Script)
				r.bindValue(irel, "script "+ck.Script, in.ScriptDigest, script)
				r.subjectsMatch(irel, intentF, r.subjects)
			}
			r.notBefore(irel, intentF, AdmissionFile, r.admFile)
			if i > 0 && prevEv == nil {
				r.add(RuleLifecycleOrder, irel, fmt.Sprintf("intent of check %d without the evidence of check %d", i, i-1))
			}
			r.notBefore(irel, intentF, prevRel, prevEv)
		}
		if evF != nil {
			r.present = append(r.present, KindCheck)
			var ce CheckEvidence
			if intentF == nil {
				r.add(RuleLifecycleOrder, erel, "check evidence without its intent")
			}
			r.notBefore(erel, evF, irel, intentF)
			if r.decode(erel, evF, PredicateCheck, &ce) && r.sameRun(erel, ce.Run, "") {
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
					if !slices.ContainsFunc(r.adm.Participants, func(p Participant) bool { return p.Node == po.Node }) {
						r.add(RuleDigestBinding, erel, fmt.Sprintf("outcome for node %q, which is not a participant", po.Node))
					}
					cr.Participants = append(cr.Participants, NodeReport{Node: po.Node, UID: po.Identity.NodeUID, Verdict: po.Verdict, Reason: po.Reason})
					allPass = allPass && po.Verdict == specs.VerdictPass
					for _, l := range po.Logs {
						if lp, _ := ParsePath(l.Path); lp.Kind != KindLog || lp.Index != i || lp.Check != ck.Name {
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
	const rel = EvidenceFile
	r.evFile = r.file(rel)
	if r.evFile == nil {
		return
	}
	var ev RunEvidence
	r.notBefore(rel, r.evFile, AdmissionFile, r.admFile)
	if !r.decode(rel, r.evFile, PredicateEvidence, &ev) || !r.sameRun(rel, ev.Run, ev.Cluster) {
		return
	}
	r.ev = &ev
	r.present = append(r.present, KindEvidence)
	r.report.Verdict, r.report.Canceled, r.report.EndedAt = ev.Verdict, ev.Canceled, ev.EndedAt
	if ev.Admission.Path != path.Join(r.dir, AdmissionFile) {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("binds admission %s, not this run's", ev.Admission.Path))
	}
	r.bind(rel, ev.Admission.Path, ev.Admission.Digest)
	r.subjectsMatch(rel, r.evFile, r.subjects)
	prof := r.adm.ProfileObject.Spec.Checks
	for i, s := range ev.Checks {
		if i >= len(prof) || s.Index != i || s.Check != prof[i].Name {
			continue // not the admitted check: checkSummary says so
		}
		erel := strings.TrimPrefix(CheckPath(r.dir, i, s.Check), r.dir+"/")
		irel := strings.TrimPrefix(CheckIntentPath(r.dir, i, s.Check), r.dir+"/")
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
func (r *runAudit) checkSummary(ev *RunEvidence) {
	prof := r.adm.ProfileObject.Spec.Checks
	docs := make([]*CheckDoc, len(prof))
	for i, ck := range prof {
		p := CheckPath(r.dir, i, ck.Name)
		f := r.file(strings.TrimPrefix(p, r.dir+"/"))
		if f == nil || f.landed.index > r.evFile.landed.index {
			continue
		}
		if r.checks[i] == nil {
			return
		}
		docs[i] = &CheckDoc{File: FileRef{Path: p, Digest: f.digest}, Evidence: *r.checks[i]}
	}
	cancel := r.file(CancelFile)
	want := Summarize(r.adm, docs, cancel != nil && cancel.landed.index <= r.evFile.landed.index)
	want.Admission, want.EndedAt = ev.Admission, ev.EndedAt
	if diff := summaryDiff(*ev, want); len(diff) > 0 {
		r.add(RuleRunSummary, EvidenceFile, "not the summary of the run's check documents: "+strings.Join(diff, "; "))
	}
}

// summaryDiff lists how got differs from want, field by field.
func summaryDiff(got, want RunEvidence) []string {
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

func (r *runAudit) checkAction(rel, predicate, action string) {
	f := r.file(rel)
	if f == nil {
		return
	}
	r.notBefore(rel, f, AdmissionFile, r.admFile)
	var act Action
	if !r.decode(rel, f, predicate, &act) || !r.sameRun(rel, act.Run, "") {
		return
	}
	if act.Action != action {
		r.add(RulePredicate, rel, fmt.Sprintf("action %q in %s", act.Action, rel))
	}
	if act.Request != r.adm.Request {
		r.add(RuleDigestBinding, rel, fmt.Sprintf("acts on %s %s, the run admitted %s", act.Request.Subject(), act.Request.Digest, r.adm.Request.Digest))
	}
	subject := signing.SubjectName(specs.KindRequest, r.id, action)
	r.subjectsMatch(rel, f, []signing.Subject{signing.SubjectFor(subject, r.adm.Request.Digest)})
	approvals := r.approvals(rel, act.Approvals)
	r.decided(rel, r.a.policy.Decide(subject, r.adm.Request.Digest, approvals, r.cluster, act.At))
	switch action {
	case signing.ActionCancel:
		if rc := r.file(ReceiptFile); rc != nil && f.landed.index > rc.landed.index {
			r.add(RuleLifecycleOrder, rel, "cancel landed after the run's receipt")
		}
	case signing.ActionRelease:
		if r.evFile == nil {
			r.add(RuleLifecycleOrder, rel, "release without run evidence")
		}
		r.notBefore(rel, f, EvidenceFile, r.evFile)
		r.report.Released = true
	}
}

func (r *runAudit) checkReceipt() {
	const rel = ReceiptFile
	r.rcFile = r.file(rel)
	if r.rcFile == nil {
		return
	}
	if r.evFile == nil {
		r.add(RuleLifecycleOrder, rel, "receipt without run evidence")
	}
	r.notBefore(rel, r.rcFile, EvidenceFile, r.evFile)
	var rc Receipt
	if !r.decode(rel, r.rcFile, PredicateReceipt, &rc) || !r.sameRun(rel, rc.Run, rc.Cluster) {
		return
	}
	r.receipt = &rc
	r.present = append(r.present, KindReceipt)
	r.report.ReceiptSequence = rc.Sequence
	evPath := path.Join(r.dir, EvidenceFile)
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
	}
	ec, ok := r.a.byHash[plumbing.NewHash(rc.EvidenceCommit)]
	switch {
	case !ok || len(rc.EvidenceCommit) != 40:
		r.add(RuleDigestBinding, rel, fmt.Sprintf("evidenceCommit %q is not a commit of the branch's first-parent history", rc.EvidenceCommit))
	case r.evFile != nil && ec.index < r.evFile.landed.index:
		r.add(RuleDigestBinding, rel, fmt.Sprintf("evidenceCommit %s is before the commit where evidence.json landed (%s)", shortHash(rc.EvidenceCommit), shortHash(r.evFile.commit.hash.String())))
	case ec.index > r.rcFile.landed.index:
		r.add(RuleDigestBinding, rel, fmt.Sprintf("evidenceCommit %s is after the receipt's own commit", shortHash(rc.EvidenceCommit)))
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

func (r *runAudit) finish() {
	for k := range r.signers {
		r.report.Signers = append(r.report.Signers, k)
	}
	sort.Strings(r.report.Signers)
	for k := range r.approver {
		r.report.Approvers = append(r.report.Approvers, k)
	}
	sort.Strings(r.report.Approvers)
	if r.report.Nodes == nil {
		r.report.Nodes = []NodeReport{}
	}
}

// checkIndex: every run has an index entry pointing at its directory, and
// every index entry points at a run directory.
func (a *auditor) checkIndex(runs map[string]*runAudit) {
	byRun := map[string]*runAudit{}
	for _, r := range runs {
		if !r.admitted {
			continue
		}
		key := r.cluster + "/" + r.id
		if o := byRun[key]; o != nil {
			a.add(Finding{Rule: RuleIndex, Cluster: r.cluster, Run: r.id, Path: r.dir, Message: fmt.Sprintf("run ID used twice in cluster %s: also %s", r.cluster, o.dir)})
		}
		byRun[key] = r
	}
	var paths []string
	for p, f := range a.files {
		if strings.HasPrefix(p, "ids/") && f.data != nil {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	pointed := map[string]bool{}
	for _, p := range paths {
		rp, ok := ParsePath(p)
		f := a.files[p]
		fail := func(msg string) {
			a.add(Finding{Rule: RuleIndex, Run: rp.Run, Path: p, Commit: f.commit.hash.String(), Message: msg})
		}
		if !ok || rp.Kind != KindIndex {
			fail("not ids/<cluster>/<xx>/<run>")
			continue
		}
		cluster, run := rp.Cluster, rp.Run
		if rp.Shard != Shard(run) {
			fail(fmt.Sprintf("shard %s, but run %s belongs in shard %s", rp.Shard, run, Shard(run)))
		}
		dir := strings.TrimSuffix(string(f.data), "\n")
		r := runs[dir]
		switch {
		case string(f.data) != dir+"\n" || strings.ContainsAny(dir, "\n\r"):
			fail("content is not one run directory and a newline")
		case r == nil || !r.admitted:
			fail(fmt.Sprintf("points at %s, which is not an admitted run directory", dir))
		case r.cluster != cluster || r.id != run:
			fail(fmt.Sprintf("points at %s, the directory of run %s of cluster %s", dir, r.id, r.cluster))
		default:
			pointed[dir] = true
			if f.landed.index > r.admFile.landed.index {
				fail("index entry landed after the run's admission")
			}
		}
	}
	for _, r := range runs {
		if r.admitted && !pointed[r.dir] {
			a.add(Finding{Rule: RuleIndex, Cluster: r.cluster, Run: r.id, Path: IndexPath(r.cluster, r.id), Message: fmt.Sprintf("no index entry points at %s", r.dir)})
		}
	}
}

// checkCopies: no signed document of one run is byte for byte a document
// of another run.
func (a *auditor) checkCopies() {
	first := map[plumbing.Hash]string{}
	var paths []string
	for p, f := range a.files {
		if f.doc != nil && f.doc.kind == kindDocument {
			paths = append(paths, p)
		}
	}
	// Oldest first, so the copy is the one reported.
	sort.Slice(paths, func(i, j int) bool {
		fi, fj := a.files[paths[i]], a.files[paths[j]]
		if fi.landed.index != fj.landed.index {
			return fi.landed.index < fj.landed.index
		}
		return paths[i] < paths[j]
	})
	for _, p := range paths {
		f := a.files[p]
		if o, ok := first[f.blob]; ok && runDirOf(o) != runDirOf(p) {
			a.add(Finding{Rule: RuleCopiedDocument, Run: runOfPath(p), Path: p, Commit: f.commit.hash.String(),
				Message: fmt.Sprintf("byte for byte the document %s of another run", o)})
			continue
		}
		first[f.blob] = p
	}
}

func runDirOf(p string) string {
	if rp, ok := ParsePath(p); ok && rp.InRun() {
		return rp.Dir()
	}
	return p
}

// checkChains audits every cluster's receipt chain: links 1..N without a
// gap, one receipt per sequence number, each linking the one before.
func (a *auditor) checkChains() {
	type link struct {
		seq  int64
		path string
		f    *fileRec
		l    ChainLink
	}
	links := map[string]map[int64]*link{}
	for p, f := range a.files {
		if !strings.HasPrefix(p, "chain/") || f.data == nil {
			continue
		}
		fail := func(msg string) {
			a.add(Finding{Rule: RuleReceiptChain, Path: p, Commit: f.commit.hash.String(), Message: msg})
		}
		rp, ok := ParsePath(p)
		if !ok || rp.Kind != KindChainLink {
			fail("not chain/<cluster>/<sequence/10000 in 8 digits>/<12-digit sequence>")
			continue
		}
		seq := rp.Seq
		if seq < 1 {
			fail(fmt.Sprintf("sequence %d: sequences start at 1", seq))
			continue
		}
		var l ChainLink
		if err := signing.StrictUnmarshal(f.data, &l); err != nil {
			fail("link does not decode: " + err.Error())
			continue
		}
		if links[rp.Cluster] == nil {
			links[rp.Cluster] = map[int64]*link{}
		}
		links[rp.Cluster][seq] = &link{seq: seq, path: p, f: f, l: l}
	}
	receipts := map[string][]*runAudit{}
	for _, r := range a.runs {
		if r.receipt != nil {
			receipts[r.cluster] = append(receipts[r.cluster], r)
		}
	}
	clusters := map[string]bool{}
	for c := range links {
		clusters[c] = true
	}
	for c := range receipts {
		clusters[c] = true
	}
	var names []string
	for c := range clusters {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		ls := links[c]
		var seqs []int64
		for s := range ls {
			seqs = append(seqs, s)
		}
		slices.Sort(seqs)
		var max int64
		if len(seqs) > 0 {
			max = seqs[len(seqs)-1]
		}
		for s := int64(1); s <= max; s++ {
			if ls[s] == nil {
				a.add(Finding{Rule: RuleReceiptChain, Cluster: c, Path: ChainPath(c, s), Message: fmt.Sprintf("gap: no link for sequence %d of cluster %s (the chain runs to %d)", s, c, max)})
			}
		}
		linked := map[string]int64{} // receipt path → sequence
		for _, s := range seqs {
			l := ls[s]
			fail := func(msg string) {
				a.add(Finding{Rule: RuleReceiptChain, Cluster: c, Run: l.l.Run, Path: l.path, Commit: l.f.commit.hash.String(), Message: msg})
			}
			rf := a.files[l.l.Receipt.Path]
			switch {
			case !isReceiptOf(l.l.Receipt.Path, c, l.l.Run):
				fail(fmt.Sprintf("links %s, not the receipt of run %s of cluster %s", l.l.Receipt.Path, l.l.Run, c))
				continue
			case rf == nil:
				fail(fmt.Sprintf("links %s, which is not on the branch", l.l.Receipt.Path))
				continue
			case rf.digest != l.l.Receipt.Digest:
				fail(fmt.Sprintf("links %s by %s, but its digest is %s", l.l.Receipt.Path, l.l.Receipt.Digest, rf.digest))
			}
			if prev := ls[s-1]; prev != nil && l.f.landed.index < prev.f.landed.index {
				fail(fmt.Sprintf("link %d landed before link %d", s, s-1))
			}
			linked[l.l.Receipt.Path] = s
		}
		bySeq := map[int64][]*runAudit{}
		byPrev := map[string][]*runAudit{}
		for _, r := range receipts[c] {
			rc := r.receipt
			rp := path.Join(r.dir, ReceiptFile)
			fail := func(msg string) {
				a.add(Finding{Rule: RuleReceiptChain, Cluster: c, Run: r.id, Path: rp, Commit: r.rcFile.commit.hash.String(), Message: msg})
			}
			bySeq[rc.Sequence] = append(bySeq[rc.Sequence], r)
			if s, ok := linked[rp]; !ok {
				fail(fmt.Sprintf("receipt with sequence %d is not linked into the chain of cluster %s", rc.Sequence, c))
			} else if s != rc.Sequence {
				fail(fmt.Sprintf("linked as sequence %d, but the receipt claims sequence %d", s, rc.Sequence))
			}
			switch {
			case rc.Sequence < 1:
				fail(fmt.Sprintf("sequence %d: sequences start at 1", rc.Sequence))
			case rc.Sequence == 1 && rc.Previous != nil:
				fail("the first receipt of the chain names a previous receipt")
			case rc.Sequence > 1 && rc.Previous == nil:
				fail(fmt.Sprintf("sequence %d without the previous receipt's digest", rc.Sequence))
			case rc.Sequence > 1:
				byPrev[string(rc.Previous.Digest)] = append(byPrev[string(rc.Previous.Digest)], r)
				prev := ls[rc.Sequence-1]
				if prev == nil {
					fail(fmt.Sprintf("previous receipt (sequence %d) is not linked", rc.Sequence-1))
					break
				}
				pf := a.files[prev.l.Receipt.Path]
				if rc.Previous.Path != prev.l.Receipt.Path || pf == nil || pf.digest != rc.Previous.Digest {
					fail(fmt.Sprintf("previous is %s %s, but sequence %d is %s", rc.Previous.Path, rc.Previous.Digest, rc.Sequence-1, prev.l.Receipt.Path))
				} else if r.rcFile.landed.index < pf.landed.index {
					fail(fmt.Sprintf("landed before the previous receipt %s", prev.l.Receipt.Path))
				}
			}
		}
		for _, group := range []map[string][]*runAudit{byPrev, seqGroups(bySeq)} {
			var keys []string
			for k := range group {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				rs := group[k]
				if len(rs) < 2 {
					continue
				}
				var ids []string
				for _, r := range rs {
					ids = append(ids, r.id)
				}
				sort.Strings(ids)
				for _, r := range rs {
					a.add(Finding{Rule: RuleReceiptChain, Cluster: c, Run: r.id, Path: path.Join(r.dir, ReceiptFile), Commit: r.rcFile.commit.hash.String(),
						Message: fmt.Sprintf("fork: receipts of runs %s claim the same %s", strings.Join(ids, ", "), k)})
				}
			}
		}
	}
}

// isReceiptOf reports whether p is the receipt of run of cluster.
func isReceiptOf(p, cluster, run string) bool {
	rp, ok := ParsePath(p)
	return ok && rp.Kind == KindReceipt && rp.Cluster == cluster && rp.Run == run
}

func seqGroups(m map[int64][]*runAudit) map[string][]*runAudit {
	out := map[string][]*runAudit{}
	for s, rs := range m {
		out[fmt.Sprintf("sequence %d", s)] = rs
	}
	return out
}

// checkSince: the branch must descend from the pinned commit.
func (a *auditor) checkSince() {
	if a.opts.Since == "" {
		return
	}
	var h plumbing.Hash
	if len(a.opts.Since) == 40 && plumbing.IsHash(a.opts.Since) {
		h = plumbing.NewHash(a.opts.Since)
	} else if rh, err := a.rd.repo.ResolveRevision(plumbing.Revision(a.opts.Since)); err == nil {
		h = *rh
	} else {
		a.add(Finding{Rule: RuleHistoryRewritten, Commit: a.opts.Since, Message: fmt.Sprintf("pinned revision %q is not in the repository: the branch was rewritten, or the pin is not a commit of it", a.opts.Since)})
		return
	}
	if _, ok := a.byHash[h]; ok {
		return
	}
	msg := fmt.Sprintf("branch %s at %s does not descend from the pinned commit %s: its history was rewritten", a.rd.branch, shortHash(a.rd.tip.String()), shortHash(h.String()))
	if a.rd.st.HasEncodedObject(h) != nil {
		msg += " (the pinned commit is not even in the repository any more)"
	}
	a.add(Finding{Rule: RuleHistoryRewritten, Commit: h.String(), Message: msg})
}

// report assembles the audit's report, findings sorted by run and path.
func (a *auditor) report() *AuditReport {
	rep := &AuditReport{Repo: a.rd.display, Branch: a.rd.branch, Tip: a.rd.tip.String(), Since: a.opts.Since,
		TrustPolicyDigest: a.policy.Digest(), Commits: len(a.commits), Files: len(a.files), Documents: a.docs,
		Runs: []RunReport{}, Findings: dedupe(a.findings)}
	byRun := map[string][]Finding{}
	for _, f := range rep.Findings {
		if f.Run != "" {
			byRun[f.Run] = append(byRun[f.Run], f)
		}
	}
	for _, r := range a.runs {
		r.report.Findings = byRun[r.id]
		rep.Runs = append(rep.Runs, r.report)
	}
	sort.SliceStable(rep.Runs, func(i, j int) bool {
		if !rep.Runs[i].AdmittedAt.Equal(rep.Runs[j].AdmittedAt) {
			return rep.Runs[i].AdmittedAt.Before(rep.Runs[j].AdmittedAt)
		}
		return rep.Runs[i].Dir < rep.Runs[j].Dir
	})
	return rep
}

func dedupe(fs []Finding) []Finding {
	seen := map[Finding]bool{}
	out := []Finding{}
	for _, f := range fs {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Run != out[j].Run {
			return out[i].Run < out[j].Run
		}
		return out[i].Path < out[j].Path
	})
	return out
}

var _ = errors.New
