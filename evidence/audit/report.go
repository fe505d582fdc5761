package audit

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/pagetable"
	"signet.dev/signet/specs"
)

// Rules an audit finding names. Each is stable: scripts may match on it.
const (
	// RuleAppendOnly: a commit changed or deleted a file of its parent.
	RuleAppendOnly = "append-only"
	// RuleLinearHistory: a merge commit on the evidence branch.
	RuleLinearHistory = "linear-history"
	// RuleCommitSignature: a commit is unsigned or its SSH signature does
	// not verify with a key allowed to sign evidence, valid at commit time.
	RuleCommitSignature = "commit-signature"
	// RuleSignature: a document's DSSE signature does not verify (forged or
	// corrupted), or the document is not a well-formed envelope.
	RuleSignature = "signature"
	// RuleUntrustedSigner: a document verifies only with a key that is not
	// allowed to sign evidence, or was not valid when it was committed.
	RuleUntrustedSigner = "untrusted-signer"
	// RulePredicate: the predicate type does not match the file name, or
	// the predicate does not decode.
	RulePredicate = "predicate"
	// RuleLayout: a file where the evidence layout puts none, or a path
	// that does not match what the document says.
	RuleLayout = "layout"
	// RuleLifecycleOrder: a document landed before the one it depends on,
	// or without it.
	RuleLifecycleOrder = "lifecycle-order"
	// RuleIncompleteRun: an admitted run has no receipt past its deadline
	// plus Options.Grace, or a fired run no admission past its firing time
	// plus evidence.FiringAdmissionBound plus Options.Grace.
	RuleIncompleteRun = "incomplete-run"
	// RuleDigestBinding: a document binds another file (or spec object)
	// by a digest that does not match it.
	RuleDigestBinding = "digest-binding"
	// RuleBundleDigest: an admission's bundle file list does not hash to
	// its bundle digest (DESIGN §3's sha256sum listing), or is not a
	// listing sha256sum could print, so the per-script digests the
	// check intents are held to are not bound to the approved bundle.
	RuleBundleDigest = "bundle-digest"
	// RuleVerdict: a recorded verdict is not what the documents it sums
	// up imply (a receipt's released and retained nodes, or its
	// certifiedUntil: none without a passing node, else after endedAt).
	RuleVerdict = "verdict"
	// RuleRunSummary: the run evidence (evidence.json) is not exactly
	// Summarize of the run's check documents and cancel: its run verdict,
	// per-check or per-node verdicts or coverage say something else.
	RuleRunSummary = "run-summary"
	// RuleReceiptChain: a gap, fork or broken link in a cluster's receipt
	// chain.
	RuleReceiptChain = "receipt-chain"
	// RuleApproval: an admission, cancel or release is not backed by
	// approvals that meet the trust policy's threshold at its time.
	RuleApproval = "approval"
	// RuleCopiedDocument: a document of one run's directory names another
	// run, or is byte for byte another run's document.
	RuleCopiedDocument = "copied-document"
	// RuleIndex: the run-ID index and the run directories disagree.
	RuleIndex = "index"
	// RuleHistoryRewritten: the branch does not descend from the commit
	// pinned with Options.Since.
	RuleHistoryRewritten = "history-rewritten"
	// RuleCommitTimeOrder: a commit of the first-parent history has a
	// committer time before its parent's: time on the branch never runs
	// backwards, so a key cannot be judged at a backdated commit.
	RuleCommitTimeOrder = "commit-time-order"
	// RuleDocumentTime: a time a document states (admittedAt, createdAt,
	// startedAt, endedAt, at) is later than the committer time of the
	// commit that added it, compared in whole seconds: a document is
	// written before it is committed.
	RuleDocumentTime = "document-time"
	// RuleFiringUnapproved: a standing certification's firing record is
	// not backed by approvals of its standing certification's digest that
	// meet the trust policy's threshold at its firing time (an expired or
	// revoked approval, another digest).
	RuleFiringUnapproved = "firing-unapproved"
	// RuleFiringAdmission: the admission of a fired run does not name its
	// firing record, or admits other nodes than the firing chose.
	RuleFiringAdmission = "firing-admission"
	// RuleFiringTip: a firing record did not land as a child of the tip
	// it says it was decided from (the strict compare-and-swap).
	RuleFiringTip = "firing-tip"
	// RuleFiringSequence: a standing certification's firings are not
	// numbered 1, 2, … without a gap, each landing after the one before.
	RuleFiringSequence = "firing-sequence"
	// RuleFiringTriggerUnproven: a firing chose a node for a due reason
	// its standing certification does not fire on, a reason that does
	// not name the run it refers to, or one the branch's history before
	// the firing does not show (the named run is not the node's latest
	// finished run of the profile, or does not make the node due).
	RuleFiringTriggerUnproven = "firing-trigger-unproven"
	// RuleBudgetExceeded: a firing takes more nodes than its standing
	// certification's budget allows for its recorded pool, takes nodes
	// its pool and in-use lists do not count, or leaves out of its in-use
	// nodes a pool node signet held at its tip.
	RuleBudgetExceeded = "budget-exceeded"
	// RuleRevocationAnchor: a key's revokedAfterCommit names a commit that
	// is not on the audited first-parent history; the key's signatures
	// then count nowhere on the branch.
	RuleRevocationAnchor = "revocation-anchor"
)

// Finding is one problem the audit found. Run and Path are empty when the
// finding is about the branch as a whole.
type Finding struct {
	Rule    string `json:"rule"`
	Cluster string `json:"cluster,omitempty"`
	Run     string `json:"run,omitempty"`
	Path    string `json:"path,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Message string `json:"message"`
}

func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.Rule)
	if f.Run != "" {
		fmt.Fprintf(&b, " run %s", f.Run)
	}
	if f.Path != "" {
		fmt.Fprintf(&b, " %s", f.Path)
	}
	if f.Commit != "" {
		fmt.Fprintf(&b, " (commit %s)", shortHash(f.Commit))
	}
	b.WriteString(": ")
	b.WriteString(f.Message)
	return b.String()
}

// Report is what Branch found. Clean reports whether there is no
// finding.
type Report struct {
	Repo              string       `json:"repo"`
	Branch            string       `json:"branch"`
	Tip               string       `json:"tip"`
	Since             string       `json:"since,omitempty"`
	TrustPolicyDigest specs.Digest `json:"trustPolicyDigest"`
	Commits           int          `json:"commits"`
	Files             int          `json:"files"`
	// Documents is the number of signed documents verified (envelopes,
	// approvals copied into runs included).
	Documents int         `json:"documents"`
	Runs      []RunReport `json:"runs"`
	Findings  []Finding   `json:"findings"`
	// Pin is the tip to pin for the next audit (--since) and the
	// reconciler (evidence.pinnedTip), set only when the audit is clean.
	Pin *Pin `json:"pin,omitempty"`
	// From names the checkpoint an incremental audit started from (nil
	// for a whole-branch audit): Commits, Files, Documents and Runs then
	// count what came after its tip, and runs it had checked are not
	// listed.
	From *CheckpointInfo `json:"checkpoint,omitempty"`
	// Checkpoint is the signed checkpoint of this audit's end, set only
	// when the audit is clean and Options.CheckpointKey was given.
	Checkpoint []byte `json:"-"`
	// CheckpointPages holds the pages of Checkpoint's state tables
	// (Options.WritePages, or a pagetable.MemStore).
	CheckpointPages pagetable.Store `json:"-"`
	// FullAudit says why an audit asked to start from a checkpoint read
	// the whole branch instead (From is then nil); empty otherwise.
	FullAudit string `json:"fullAudit,omitempty"`
	// Resume is the state of this audit's end, for the next audit in
	// this process (Options.Resume); set only when the audit is clean
	// and Options.KeepResume was given.
	Resume *Resume `json:"-"`
}

// Clean reports whether the audit found nothing.
func (r *Report) Clean() bool { return len(r.Findings) == 0 }

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// RunReport is what the branch says about one run, as audited.
type RunReport struct {
	Cluster    string         `json:"cluster"`
	Run        string         `json:"run"`
	Dir        string         `json:"dir"`
	Phase      evidence.Phase `json:"phase"`
	Verdict    specs.Verdict  `json:"verdict,omitempty"`
	Canceled   bool           `json:"canceled,omitempty"`
	Released   bool           `json:"released,omitempty"`
	Profile    string         `json:"profile,omitempty"`
	SpecCommit string         `json:"specCommit,omitempty"`
	// FiredAt is a standing certification's run's firing time.
	FiredAt    time.Time `json:"firedAt,omitzero"`
	AdmittedAt time.Time `json:"admittedAt,omitzero"`
	Deadline   time.Time `json:"runDeadline,omitzero"`
	EndedAt    time.Time `json:"endedAt,omitzero"`
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
	// listed by Verify (one run); Branch leaves them out, a binding that
	// fails being a finding (a branch of 10^5 runs holds millions).
	Bindings []Binding `json:"bindings,omitempty"`
	// Findings are this run's findings (also in Report.Findings).
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
