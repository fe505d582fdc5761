package audit

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// StatusOptions says which branch (and cluster) to summarize.
type StatusOptions struct {
	Repo   string
	Auth   evidence.Auth
	Branch string
	// Cluster limits the status to one cluster; empty: every cluster.
	Cluster string
}

// BranchStatus is what the tip of an evidence branch says about runs and
// nodes. It is read, not proven: Status does not verify signatures or
// history (Branch and Verify do).
type BranchStatus struct {
	Repo   string       `json:"repo"`
	Branch string       `json:"branch"`
	Tip    string       `json:"tip"`
	Runs   []RunStatus  `json:"runs"`
	Nodes  []NodeStatus `json:"nodes"`
}

// RunStatus is one run as its documents on the tip describe it.
type RunStatus struct {
	Cluster         string         `json:"cluster"`
	Run             string         `json:"run"`
	Dir             string         `json:"dir"`
	Phase           evidence.Phase `json:"phase"`
	Verdict         specs.Verdict  `json:"verdict,omitempty"`
	Canceled        bool           `json:"canceled,omitempty"`
	Released        bool           `json:"released,omitempty"`
	Profile         string         `json:"profile,omitempty"`
	Nodes           []NodeReport   `json:"nodes"`
	Checks          []CheckReport  `json:"checks,omitempty"`
	ReceiptSequence int64          `json:"receiptSequence,omitempty"`
	// FiredAt is a standing certification's run's firing time.
	FiredAt    time.Time `json:"firedAt,omitzero"`
	AdmittedAt time.Time `json:"admittedAt,omitzero"`
	Deadline   time.Time `json:"runDeadline,omitzero"`
	EndedAt    time.Time `json:"endedAt,omitzero"`
	// Problem says why a document could not be read, when one could not.
	Problem string `json:"problem,omitempty"`
}

// NodeStatus is a node's latest verdict: from the run evidence that ended
// last among the runs covering it.
type NodeStatus struct {
	Cluster string        `json:"cluster"`
	Node    string        `json:"node"`
	Verdict specs.Verdict `json:"verdict"`
	Run     string        `json:"run"`
	At      time.Time     `json:"at"`
}

// Status lists the runs of the branch (through the ids/ index) with their
// phase, derived from which documents exist, verdicts and receipt
// sequence, and each node's latest verdict. Documents are decoded without
// verifying their signatures.
func Status(ctx context.Context, opts StatusOptions) (*BranchStatus, error) {
	if opts.Branch == "" {
		opts.Branch = evidence.DefaultBranch
	}
	rd, err := openBranch(ctx, opts.Repo, opts.Auth, opts.Branch)
	if err != nil {
		return nil, err
	}
	defer rd.close()
	root, err := rootTree(rd)
	if err != nil {
		return nil, err
	}
	st := &BranchStatus{Repo: rd.display, Branch: rd.branch, Tip: rd.tip.String(), Runs: []RunStatus{}, Nodes: []NodeStatus{}}
	entries, err := walkFiles(rd, root, "ids")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rp, ok := evidence.ParsePath(e.path)
		if !ok || rp.Kind != evidence.KindIndex || (opts.Cluster != "" && rp.Cluster != opts.Cluster) {
			continue
		}
		data, err := readRaw(rd, plumbing.BlobObject, e.hash)
		if err != nil {
			return nil, err
		}
		rs := readRunStatus(rd, root, rp.Cluster, rp.Run, strings.TrimSpace(string(data)))
		st.Runs = append(st.Runs, rs)
	}
	sort.SliceStable(st.Runs, func(i, j int) bool {
		if !st.Runs[i].AdmittedAt.Equal(st.Runs[j].AdmittedAt) {
			return st.Runs[i].AdmittedAt.Before(st.Runs[j].AdmittedAt)
		}
		return st.Runs[i].Run < st.Runs[j].Run
	})
	latest := map[string]NodeStatus{}
	for _, r := range st.Runs {
		if r.Verdict == "" {
			continue
		}
		for _, n := range r.Nodes {
			key := r.Cluster + "/" + n.Node
			if cur, ok := latest[key]; !ok || !r.EndedAt.Before(cur.At) {
				latest[key] = NodeStatus{Cluster: r.Cluster, Node: n.Node, Verdict: n.Verdict, Run: r.Run, At: r.EndedAt}
			}
		}
	}
	for _, n := range latest {
		st.Nodes = append(st.Nodes, n)
	}
	sort.Slice(st.Nodes, func(i, j int) bool {
		if st.Nodes[i].Cluster != st.Nodes[j].Cluster {
			return st.Nodes[i].Cluster < st.Nodes[j].Cluster
		}
		return st.Nodes[i].Node < st.Nodes[j].Node
	})
	return st, nil
}

// readRunStatus reads the documents of one run directory at the tip.
func readRunStatus(rd BranchReader, root plumbing.Hash, cluster, run, dir string) (rs RunStatus) {
	rs = RunStatus{Cluster: cluster, Run: run, Dir: dir, Phase: evidence.PhaseUnknown, Nodes: []NodeReport{}}
	var present []evidence.FileKind
	defer func() { rs.Phase = evidence.PhaseOf(present...) }()
	dirHash, err := lookupTree(rd, root, dir)
	if err != nil || dirHash.IsZero() {
		rs.Problem = fmt.Sprintf("the index points at %s, which is not on the branch", dir)
		return rs
	}
	read := func(rel, predicate string, v any) bool {
		e, err := lookupEntry(rd, dirHash, rel)
		if err != nil || e == nil {
			return false
		}
		b, err := readRaw(rd, plumbing.BlobObject, e.Hash)
		if err == nil {
			var env *signing.Envelope
			var st *signing.Statement
			if env, err = signing.ParseEnvelope(b); err == nil {
				if st, err = env.Statement(); err == nil {
					if st.PredicateType != predicate {
						err = fmt.Errorf("predicate type %q", st.PredicateType)
					} else {
						err = signing.StrictUnmarshal(st.Predicate, v)
					}
				}
			}
		}
		if err != nil && rs.Problem == "" {
			rs.Problem = fmt.Sprintf("%s: %v", path.Join(dir, rel), err)
		}
		return err == nil
	}
	var fr evidence.Firing
	if read(evidence.FiringFile, evidence.PredicateFiring, &fr) {
		// A standing certification's run: until its admission, the
		// firing's chosen nodes are the run's.
		present = append(present, evidence.KindFiring)
		rs.FiredAt = fr.FiredAt
		for _, c := range fr.Chosen {
			rs.Nodes = append(rs.Nodes, NodeReport{Node: c.Node, UID: c.UID})
		}
	}
	var adm evidence.Admission
	if !read(evidence.AdmissionFile, evidence.PredicateAdmission, &adm) {
		return rs
	}
	present = append(present, evidence.KindAdmission)
	rs.Profile, rs.AdmittedAt, rs.Deadline = adm.Profile.Name, adm.AdmittedAt, adm.RunDeadline
	rs.Nodes = rs.Nodes[:0]
	for _, p := range adm.Participants {
		rs.Nodes = append(rs.Nodes, NodeReport{Node: p.Node, UID: p.UID})
	}
	for i, ck := range adm.ProfileObject.Spec.Checks {
		cr := CheckReport{Index: i, Name: ck.Name}
		var in evidence.CheckIntent
		cr.Intent = read(strings.TrimPrefix(evidence.CheckIntentPath(dir, i, ck.Name), dir+"/"), evidence.PredicateCheckIntent, &in)
		var ce evidence.CheckEvidence
		if read(strings.TrimPrefix(evidence.CheckPath(dir, i, ck.Name), dir+"/"), evidence.PredicateCheck, &ce) {
			cr.Evidence, cr.Verdict, cr.Reason = true, ce.Verdict, ce.Reason
		}
		if cr.Intent {
			present = append(present, evidence.KindCheckIntent)
		}
		if cr.Evidence {
			present = append(present, evidence.KindCheck)
		}
		rs.Checks = append(rs.Checks, cr)
	}
	var act evidence.Action
	rs.Canceled = read(evidence.CancelFile, evidence.PredicateCancel, &act)
	var ev evidence.RunEvidence
	if read(evidence.EvidenceFile, evidence.PredicateEvidence, &ev) {
		present = append(present, evidence.KindEvidence)
		rs.Verdict, rs.EndedAt = ev.Verdict, ev.EndedAt
		for _, n := range ev.Nodes {
			for i := range rs.Nodes {
				if rs.Nodes[i].Node == n.Node {
					rs.Nodes[i].Verdict = n.Verdict
				}
			}
		}
		for _, s := range ev.Checks {
			if s.Index < len(rs.Checks) {
				rs.Checks[s.Index].Verdict, rs.Checks[s.Index].Skipped = s.Verdict, s.Skipped
			}
		}
	}
	rs.Released = read(evidence.ReleaseFile, evidence.PredicateRelease, &act)
	var rc evidence.Receipt
	if read(evidence.ReceiptFile, evidence.PredicateReceipt, &rc) {
		present = append(present, evidence.KindReceipt)
		rs.ReceiptSequence = rc.Sequence
	}
	return rs
}
