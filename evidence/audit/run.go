package audit

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// runAudit is one run directory being audited.
type runAudit struct {
	a       *auditor
	cluster string
	id      string
	dir     string
	files   map[string]*fileRec // by path relative to dir
	bound   map[string]bool     // relative paths some document binds

	adm     *evidence.Admission
	admFile *fileRec
	// firing and firFile: the run's firing record (a standing
	// certification's run); fired: it verified and decoded.
	firing   *evidence.Firing
	firFile  *fileRec
	fired    bool
	subjects []signing.Subject
	ev       *evidence.RunEvidence
	evFile   *fileRec
	receipt  *evidence.Receipt
	rcFile   *fileRec
	checks   []*evidence.CheckEvidence
	// present are the kinds of the run's documents that are there and
	// decode (intents and check evidence: that are there): its phase.
	present  []evidence.FileKind
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
	// restored from a checkpoint, checked by the audit that wrote it; not
	// reported unless a later file reopens it.
	restored bool
	// ref: a finished run of the checkpoint's tables that the
	// whole-branch rules compare this audit's runs and files with
	// (restoreReferences); never checked again itself.
	ref bool
	// What check decoded besides adm, checks, ev and receipt, kept for
	// documents (Options.Observe) until compact.
	snapshots  map[string]*evidence.NodeSnapshot
	intents    []*evidence.CheckIntent
	actions    map[string]*evidence.Action
	approvedBy map[string][]string
	// releaseApproved: the release document met the trust policy.
	releaseApproved bool
	// compacted: check ran and compactFiles dropped the file records
	// but those keptRel names (files); closed is what stays of them.
	compacted bool
	closed    []closedFile
	spilled   spillRef
	// link is what checkChains reads of the receipt once compact has
	// dropped it (linked: there was one).
	link   receiptLink
	linked bool
	// hist is what the run adds to the replay that proves firings
	// (checkFiringHistory), kept by compact; nil for a run restored from
	// a checkpoint, whose part the checkpoint's state holds.
	hist *runHistory
}

func newRunAudit(a *auditor, cluster, id, dir string, files map[string]*fileRec) *runAudit {
	return &runAudit{a: a, cluster: cluster, id: id, dir: dir, files: files, bound: map[string]bool{},
		signers: map[string]bool{}, approver: map[string]bool{},
		snapshots: map[string]*evidence.NodeSnapshot{}, actions: map[string]*evidence.Action{}, approvedBy: map[string][]string{}}
}

// compact drops what only the run's own check reads, once it is done:
// decoded documents and predicates, node snapshots, approval copies. What
// the whole-branch checks read (digests, landing commits, the receipt)
// and the report stay.
func (r *runAudit) compact() error {
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
	r.adm, r.ev, r.checks, r.subjects, r.bound, r.firing = nil, nil, nil, nil, nil, nil
	r.snapshots, r.intents, r.actions, r.approvedBy = nil, nil, nil, nil
	if r.a.stream {
		r.finish()
		r.signers, r.approver = nil, nil
		return r.compactFiles()
	}
	return nil
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
	return r.checkTimes(rel, f, v)
}

// checkTimes holds document f (at rel, its predicate decoded into v) to
// the times it states (evidence.StatedTimes): none may be later than the
// committer time of the commit that added f, compared in whole seconds
// (a committer time has none of the fraction the document's time may
// have: a time in the commit's second passes), and a key that signed f
// counts only when valid at the latest of them and the commit's time.
// It returns false when no key that signed f is: f then does not count.
func (r *runAudit) checkTimes(rel string, f *fileRec, v any) bool {
	commit := f.commit.when
	latest := commit
	for _, t := range evidence.StatedTimes(v) {
		if t.Truncate(time.Second).After(commit) {
			r.add(RuleDocumentTime, rel, fmt.Sprintf("states the time %s, after the committer time %s of the commit that added it: a document is written before it is committed",
				t.UTC().Format(time.RFC3339Nano), commit.UTC().Format(time.RFC3339)))
		}
		if t.After(latest) {
			latest = t
		}
	}
	if latest.Equal(commit) {
		return true // the pool judged the keys at the commit's time
	}
	var why []string
	for _, k := range f.doc.keys {
		w := r.a.policy.KeyValidAt(k, latest)
		if w == "" {
			return true
		}
		why = append(why, w)
	}
	r.add(RuleUntrustedSigner, rel, fmt.Sprintf("%s (judged at the time the document states, %s, later than its commit's)", strings.Join(why, "; "), latest.UTC().Format(time.RFC3339Nano)))
	r.unverified = true
	return false
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
		if rp, ok := evidence.ParsePath(p); ok && rp.InRun() {
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

// check audits one run directory.
func (r *runAudit) check() {
	r.report = RunReport{Cluster: r.cluster, Run: r.id, Dir: r.dir}
	defer func() { r.report.Phase = evidence.PhaseOf(r.present...) }()
	defer r.collectHistory()
	at, _ := evidence.ParsePath(r.dir)
	if !evidence.IsDNSLabel(r.cluster) {
		r.add(RuleLayout, "", fmt.Sprintf("cluster %q is not a DNS label", r.cluster))
	}
	if at.Shard != evidence.Shard(r.id) {
		r.add(RuleLayout, "", fmt.Sprintf("shard %s, but run %s belongs in shard %s", at.Shard, r.id, evidence.Shard(r.id)))
	}
	r.checkFiring()
	r.admFile = r.file(evidence.AdmissionFile)
	var adm evidence.Admission
	if r.admFile == nil && r.firFile != nil {
		r.checkFiredOnly()
		r.checkUnbound()
		return
	}
	if r.admFile == nil {
		r.add(RuleLifecycleOrder, "", "the run directory has no admission.json: every document of a run follows its admission")
		return
	}
	if !r.decode(evidence.AdmissionFile, r.admFile, evidence.PredicateAdmission, &adm) {
		return
	}
	r.adm, r.admitted = &adm, true
	r.present = append(r.present, evidence.KindAdmission)
	r.report.Profile = adm.Profile.Name
	r.report.SpecCommit = adm.SpecCommit
	r.report.AdmittedAt, r.report.Deadline = adm.AdmittedAt, adm.RunDeadline
	r.checkAdmission()
	r.checkChecks()
	r.checkEvidence()
	r.checkAction(evidence.CancelFile, evidence.PredicateCancel, signing.ActionCancel)
	r.checkAction(evidence.ReleaseFile, evidence.PredicateRelease, signing.ActionRelease)
	r.checkReceipt()
	if r.rcFile == nil && r.a.opts.Now.After(adm.RunDeadline.Add(r.a.opts.Grace)) {
		r.add(RuleIncompleteRun, "", fmt.Sprintf("admitted at %s with run deadline %s and no receipt at %s (grace %s)",
			adm.AdmittedAt.UTC().Format(time.RFC3339), adm.RunDeadline.UTC().Format(time.RFC3339), r.a.opts.Now.UTC().Format(time.RFC3339), r.a.opts.Grace))
	}
	r.checkUnbound()
}

// checkUnbound: every file of the run directory is bound by some document.
func (r *runAudit) checkUnbound() {
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

// finish writes the run's signers and approvers into its report, once:
// compact calls it for the runs it drops (their maps then go), checkAll
// for the others.
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
