package evidence

import (
	"slices"
	"time"

	"signet.dev/signet/specs"
)

// Phase is where a run stands in its lifecycle (DESIGN §5). Its values
// appear in status and audit output (JSON) and are stable.
type Phase string

// Run phases, in lifecycle order. PhaseUnknown: the run's admission is
// missing or unreadable (and it is not a firing waiting for one).
// PhaseFired: a standing certification's firing record without its
// admission yet. PhaseReleasing is the writer's own phase between
// its run evidence and its receipt; the documents of a run never show it.
const (
	PhaseUnknown   Phase = "Unknown"
	PhaseFired     Phase = "Fired"
	PhaseAdmitted  Phase = "Admitted"
	PhaseChecking  Phase = "Checking"
	PhaseEvidence  Phase = "Evidence"
	PhaseReleasing Phase = "Releasing"
	PhaseDone      Phase = "Done"
)

// PhaseOf is the phase of a run from the kinds of its documents that are
// present (and readable): Done with a receipt, Evidence with run evidence,
// Checking with an intent or a check's evidence, Admitted with only the
// admission, Fired with only a firing record, and Unknown without an
// admission otherwise, whatever else is there.
func PhaseOf(files ...FileKind) Phase {
	switch {
	case !slices.Contains(files, KindAdmission):
		if slices.Contains(files, KindFiring) && !slices.ContainsFunc(files, afterAdmission) {
			return PhaseFired
		}
		return PhaseUnknown
	case slices.Contains(files, KindReceipt):
		return PhaseDone
	case slices.Contains(files, KindEvidence):
		return PhaseEvidence
	case slices.Contains(files, KindCheckIntent) || slices.Contains(files, KindCheck):
		return PhaseChecking
	}
	return PhaseAdmitted
}

// afterAdmission reports the kinds of documents that only follow an
// admission.
func afterAdmission(k FileKind) bool {
	switch k {
	case KindCheckIntent, KindCheck, KindEvidence, KindCancel, KindRelease, KindReceipt:
		return true
	}
	return false
}

// FiringAdmissionBound is how long after its firing time a firing may wait
// for its admission: a reconciler admits a firing in the pass that fired
// it, and a restarted one resumes it first thing. The audit flags a firing
// without admission past FiringAdmissionBound plus its grace, as it flags
// an admitted run without receipt past its run deadline.
const FiringAdmissionBound = time.Hour

// ScriptDigest is the digest the admission recorded for script (a path
// relative to the bundle), false when the admitted bundle has no such
// file.
func (a *Admission) ScriptDigest(script string) (specs.Digest, bool) {
	var d specs.Digest
	found := false
	for _, f := range a.Bundle.Files {
		if f.Path == script {
			d, found = f.Digest, true
		}
	}
	return d, found
}

// CheckDoc is one check's evidence document as its run directory holds it:
// the file's reference and its decoded predicate.
type CheckDoc struct {
	File     FileRef
	Evidence CheckEvidence
}

// Summarize folds the evidence documents of a run's checks into its run
// evidence (DESIGN §4): checks[i] is the evidence of the admitted profile's
// check i, nil (or absent) for a check that never ran, which is recorded
// as skipped. canceled says that an approved cancel is durable. The
// writer records exactly what Summarize returns, with Admission and
// EndedAt set; the auditor requires the recorded evidence to be equal.
//
//   - a check's verdict is its evidence's; a skipped check's is Canceled
//     when canceled and Error otherwise: it covered no node;
//   - the run verdict is specs.RunVerdict over the checks' verdicts;
//   - covered is false when any check was skipped;
//   - a node's verdict is specs.NodeVerdict over its outcomes in the
//     checks, with a skipped check (or a check without an outcome for
//     it) counting as not run; when canceled, a node that did not pass
//     is Canceled.
func Summarize(adm *Admission, checks []*CheckDoc, canceled bool) RunEvidence {
	notRun := specs.VerdictError
	if canceled {
		notRun = specs.VerdictCanceled
	}
	ev := RunEvidence{Run: adm.Run, Cluster: adm.Cluster, Canceled: canceled, Covered: true}
	outcomes := map[string][]specs.Verdict{} // node → verdicts of the checks that covered it
	var verdicts []specs.Verdict
	for i, ck := range adm.ProfileObject.Spec.Checks {
		s := CheckSummary{Index: i, Check: ck.Name, Verdict: notRun, Skipped: true}
		if i < len(checks) && checks[i] != nil {
			ref := checks[i].File
			s.Verdict, s.Evidence, s.Skipped = checks[i].Evidence.Verdict, &ref, false
			for _, p := range checks[i].Evidence.Participants {
				outcomes[p.Node] = append(outcomes[p.Node], p.Verdict)
			}
		}
		ev.Covered = ev.Covered && !s.Skipped
		verdicts = append(verdicts, s.Verdict)
		ev.Checks = append(ev.Checks, s)
	}
	ev.Verdict = specs.RunVerdict(canceled, verdicts)
	for _, p := range adm.Participants {
		vs := outcomes[p.Node]
		if !ev.Covered || len(vs) != len(ev.Checks) {
			vs = append(vs, notRun)
		}
		nv := specs.NodeVerdict(vs)
		if canceled && nv != specs.VerdictPass {
			nv = specs.VerdictCanceled
		}
		ev.Nodes = append(ev.Nodes, NodeSummary{Node: p.Node, Verdict: nv})
	}
	return ev
}

// StatedTimes returns the times a document's predicate (a pointer to one
// of the predicate types) states about its own writing: an admission's
// admittedAt, an intent's createdAt, a check's startedAt and endedAt, the
// run evidence's endedAt, a cancel's or release's at, a receipt's at and a
// firing's firedAt.
// Deadlines are left out (they lie ahead by design), and so are zero times
// (not recorded: an interrupted check has no start or end). The writer
// reads each of them from its clock before it commits the document, so
// none is later than the commit's time; the audit requires exactly that
// (rule document-time) and judges the signing key at the latest of them.
func StatedTimes(predicate any) []time.Time {
	var ts []time.Time
	switch p := predicate.(type) {
	case *Admission:
		ts = []time.Time{p.AdmittedAt}
	case *CheckIntent:
		ts = []time.Time{p.CreatedAt}
	case *CheckEvidence:
		ts = []time.Time{p.StartedAt, p.EndedAt}
	case *RunEvidence:
		ts = []time.Time{p.EndedAt}
	case *Action:
		ts = []time.Time{p.At}
	case *Receipt:
		ts = []time.Time{p.At}
	case *Firing:
		ts = []time.Time{p.FiredAt}
	}
	return slices.DeleteFunc(ts, time.Time.IsZero)
}
