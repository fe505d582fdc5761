package report

import (
	"sort"
	"sync"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// collector receives the audit's verified documents, from several
// goroutines; the last call for a run directory holds.
type collector struct {
	mu   sync.Mutex
	runs map[string]*audit.RunDocuments
}

func (c *collector) observe(d *audit.RunDocuments) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[d.Dir] = d
}

// run is one run as the report shows it.
type run struct {
	Cluster, ID, Dir string
	Profile          string
	Phase            evidence.Phase
	Verdict          specs.Verdict
	AdmittedAt       time.Time
	// FiredAt is a standing certification's run's firing time.
	FiredAt time.Time
	EndedAt time.Time
	// Withheld: a finding names the run (or the whole branch), so no page
	// shows its documents; Findings says why.
	Withheld bool
	Findings []audit.Finding
	// Docs are the verified documents; nil when Withheld.
	Docs *audit.RunDocuments
	// Nodes are the participants the audit read from the admission
	// (names only; a withheld run's nodes are shown unproven).
	Nodes []string
}

// Started is when the run began: its firing, or its admission for a run
// that was not fired.
func (r *run) Started() time.Time {
	if !r.FiredAt.IsZero() {
		return r.FiredAt
	}
	return r.AdmittedAt
}

// Href is the run page's path from the report root.
func (r *run) Href() string { return "runs/" + r.Cluster + "/" + r.ID + ".html" }

// nodeKey names a node of a cluster.
type nodeKey struct{ Cluster, Node string }

// model is everything the pages show, built once per report.
type model struct {
	Audit  *audit.Report
	Policy *signing.TrustPolicy
	// Runs newest first (admission time, then directory).
	Runs []*run
	// BranchFindings are the findings naming no run.
	BranchFindings []audit.Finding
	AsOf           time.Time
	TTL, Expiring  time.Duration
}

// newModel joins the audit's report and the documents it verified.
func newModel(rep *audit.Report, docs map[string]*audit.RunDocuments, policy *signing.TrustPolicy, ttl, expiring time.Duration) *model {
	m := &model{Audit: rep, Policy: policy, TTL: ttl, Expiring: expiring}
	for _, f := range rep.Findings {
		if f.Run == "" {
			m.BranchFindings = append(m.BranchFindings, f)
		}
	}
	for _, rr := range rep.Runs {
		r := &run{Cluster: rr.Cluster, ID: rr.Run, Dir: rr.Dir, Profile: rr.Profile, Phase: rr.Phase, Verdict: rr.Verdict,
			AdmittedAt: rr.AdmittedAt, FiredAt: rr.FiredAt, EndedAt: rr.EndedAt}
		for _, n := range rr.Nodes {
			r.Nodes = append(r.Nodes, n.Node)
		}
		for _, f := range rep.Findings {
			if f.Run == rr.Run && (f.Cluster == "" || f.Cluster == rr.Cluster) {
				r.Findings = append(r.Findings, f)
			}
		}
		d := docs[rr.Dir]
		// The rule of the package: no page from a document the audit
		// did not prove. A finding anywhere on the run, or on the
		// branch, withholds it.
		// A fired run without admission yet shows its firing record.
		fired := d != nil && d.Admission == nil && d.Firing != nil && rr.Phase == evidence.PhaseFired
		r.Withheld = len(r.Findings) > 0 || len(m.BranchFindings) > 0 || d == nil || d.Admission == nil && !fired
		if !r.Withheld {
			r.Docs = d
			if fired {
				r.Profile = d.Firing.StandingObject.Spec.Profile
			}
			for _, t := range []time.Time{rr.FiredAt, rr.AdmittedAt, rr.EndedAt} {
				if t.After(m.AsOf) {
					m.AsOf = t
				}
			}
			if d.Receipt != nil && d.Receipt.At.After(m.AsOf) {
				m.AsOf = d.Receipt.At
			}
		} else {
			r.Verdict = ""
		}
		m.Runs = append(m.Runs, r)
	}
	sort.SliceStable(m.Runs, func(i, j int) bool {
		a, b := m.Runs[i], m.Runs[j]
		if !a.Started().Equal(b.Started()) {
			return a.Started().After(b.Started())
		}
		return a.Dir > b.Dir
	})
	m.AsOf = m.AsOf.UTC()
	return m
}

// Owner names key id by its owner in the trust policy, the short id when
// the policy records none.
func (m *model) Owner(id string) string {
	if o := m.Policy.Owner(id); o != "" {
		return o
	}
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// nodeRun is one node's part in one run.
type nodeRun struct {
	Run      *run
	Verdict  specs.Verdict
	Snapshot *evidence.NodeSnapshot
	Retained bool
	Released bool
	// Changed lists the identity fields that differ from the node's
	// previous run (older), empty for its first.
	Changed []string
}

// nodeState is where a node stands for one profile.
type nodeState int

const (
	stateNone nodeState = iota
	stateCertified
	stateExpiring
	stateFailing
	stateRetained
	stateOpen
	stateUnproven
)

// nodes returns every node's runs, newest first, by cluster and node,
// from verified runs only.
func (m *model) nodes() map[nodeKey][]*nodeRun {
	out := map[nodeKey][]*nodeRun{}
	for _, r := range m.Runs {
		if r.Withheld {
			// A withheld run still counts as the node's latest: the
			// node is unproven, never certified by an older run.
			for _, n := range r.Nodes {
				k := nodeKey{r.Cluster, n}
				out[k] = append(out[k], &nodeRun{Run: r})
			}
			continue
		}
		d := r.Docs
		if d.Admission == nil { // fired: its chosen nodes are claimed, the run open
			for _, c := range d.Firing.Chosen {
				k, open := nodeKey{r.Cluster, c.Node}, &nodeRun{Run: r}
				out[k] = append(out[k], open)
			}
			continue
		}
		for _, p := range d.Admission.Participants {
			nr := &nodeRun{Run: r, Snapshot: d.Snapshots[p.Node]}
			if d.Evidence != nil {
				for _, n := range d.Evidence.Nodes {
					if n.Node == p.Node {
						nr.Verdict = n.Verdict
					}
				}
			}
			if d.Receipt != nil {
				for _, n := range d.Receipt.Retained {
					if n == p.Node {
						nr.Retained = true
					}
				}
			}
			if d.Release != nil {
				nr.Retained, nr.Released = false, true
			}
			k := nodeKey{r.Cluster, p.Node}
			out[k] = append(out[k], nr)
		}
	}
	for _, rs := range out {
		for i := range rs {
			if i+1 < len(rs) {
				rs[i].Changed = identityChanges(rs[i+1].Snapshot, rs[i].Snapshot)
			}
		}
	}
	return out
}

// identityChanges lists the identity fields that differ between two
// snapshots of a node.
func identityChanges(old, cur *evidence.NodeSnapshot) []string {
	if old == nil || cur == nil {
		return nil
	}
	var out []string
	for _, f := range []struct{ name, a, b string }{
		{"UID", old.UID, cur.UID}, {"systemUUID", old.SystemUUID, cur.SystemUUID}, {"bootID", old.BootID, cur.BootID},
		{"kernel", old.Kernel, cur.Kernel}, {"GPU", old.GPUProduct, cur.GPUProduct}, {"driver", old.GPUDriver, cur.GPUDriver},
	} {
		if f.a != f.b {
			out = append(out, f.name)
		}
	}
	return out
}

// state is a node's state from its latest run of a profile (newest
// first), as of m.AsOf: certified until TTL after its Pass run ended,
// expiring in the last Expiring of that, failing after a non-Pass,
// retained while a non-Pass run holds it, open while its run has no
// verdict, unproven when its latest run is withheld.
func (m *model) state(latest *nodeRun) (nodeState, time.Time) {
	switch {
	case latest.Run.Withheld:
		return stateUnproven, time.Time{}
	case latest.Verdict == "":
		return stateOpen, time.Time{}
	case latest.Verdict != specs.VerdictPass && latest.Retained:
		return stateRetained, time.Time{}
	case latest.Verdict != specs.VerdictPass:
		return stateFailing, time.Time{}
	}
	if m.TTL <= 0 {
		return stateCertified, time.Time{}
	}
	until := latest.Run.EndedAt.Add(m.TTL).UTC()
	switch {
	case !m.AsOf.Before(until):
		return stateNone, until
	case until.Sub(m.AsOf) <= m.Expiring:
		return stateExpiring, until
	}
	return stateCertified, until
}
