package audit

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
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

// runHistory is what one run contributes to the replay of the branch's
// history that proves firings (checkFiringHistory): taken from its
// verified documents when the run is checked, kept when compact drops
// them. Indexes are the first-parent index of the commit where a document
// landed, -1 when it is not there (or did not verify and decode).
type runHistory struct {
	firing   *evidence.Firing
	firingAt int
	// admittedAt, nodes and snaps: the admission and its participants,
	// with their snapshots (fired runs only: the identity reasons).
	admittedAt int
	nodes      []string
	snaps      map[string]evidence.NodeSnapshot
	// receiptAt, nodeRuns and retained: the receipt, the run's
	// evidence.NodeRuns and the nodes it retained.
	receiptAt int
	nodeRuns  []evidence.NodeRun
	retained  []string
	// releaseAt and released: an approved release and the nodes it
	// released.
	releaseAt int
	released  []string
}

// collectHistory records r's runHistory from what check verified.
func (r *runAudit) collectHistory() {
	h := &runHistory{firingAt: -1, admittedAt: -1, receiptAt: -1, releaseAt: -1}
	if r.firing != nil && r.firFile != nil {
		h.firing, h.firingAt = r.firing, r.firFile.landed.index
	}
	if r.adm != nil && r.admFile != nil {
		h.admittedAt = r.admFile.landed.index
		for _, p := range r.adm.Participants {
			h.nodes = append(h.nodes, p.Node)
		}
	}
	snaps := map[string]evidence.NodeSnapshot{}
	for n, s := range r.snapshots {
		snaps[n] = *s
	}
	if h.firing != nil {
		h.snaps = snaps
	}
	if r.receipt != nil && r.rcFile != nil && h.admittedAt >= 0 {
		h.receiptAt, h.retained = r.rcFile.landed.index, r.receipt.Retained
		if r.ev != nil {
			h.nodeRuns = evidence.NodeRuns(r.adm, snaps, r.ev, r.receipt)
			for i := range h.nodeRuns {
				// Not identity (evidence.IdentityChanges): kept for every
				// finished run until the replay, and in checkpoints.
				h.nodeRuns[i].Identity.Capacity, h.nodeRuns[i].Identity.Allocatable = nil, nil
			}
		}
	}
	if act := r.actions[evidence.ReleaseFile]; act != nil && r.releaseApproved && h.receiptAt >= 0 {
		h.releaseAt, h.released = r.files[evidence.ReleaseFile].landed.index, act.Nodes
		if len(h.released) == 0 {
			h.released = h.retained // a release that names no node releases what the run retains
		}
	}
	if h.firingAt < 0 && h.admittedAt < 0 {
		return
	}
	r.hist = h
}

// How a run holds a node (historyState.held).
const (
	holdChosen   = "chosen"
	holdAdmitted = "admitted"
	holdRetained = "retained"
)

// historyState is the replay's state at one point of the first-parent
// history, per cluster: each node's latest finished run of each profile
// (evidence.LatestRuns, as the reconciler reads it), and the nodes signet
// holds: chosen by a firing or admitted by a run without receipt yet,
// or retained by a receipt and not released by an approved release.
// A checkpoint carries it (State.Latest, State.Held, State.Pending).
type historyState struct {
	latest map[string]*evidence.LatestRuns
	// held: cluster → node → run → how.
	held map[string]map[string]map[string]string
	// pending: run directory → node → the snapshot in the run that the
	// node's identity reason names, for firings not admitted yet (their
	// identity reasons are proven by their admission's snapshots).
	pending map[string]map[string]evidence.NodeSnapshot
}

func (st *historyState) init() {
	if st.latest == nil {
		st.latest = map[string]*evidence.LatestRuns{}
		st.held = map[string]map[string]map[string]string{}
		st.pending = map[string]map[string]evidence.NodeSnapshot{}
	}
}

func (st *historyState) latestOf(cluster string) *evidence.LatestRuns {
	l := st.latest[cluster]
	if l == nil {
		l = &evidence.LatestRuns{}
		st.latest[cluster] = l
	}
	return l
}

func (st *historyState) hold(cluster, node, run, how string) {
	if st.held[cluster] == nil {
		st.held[cluster] = map[string]map[string]string{}
	}
	if st.held[cluster][node] == nil {
		st.held[cluster][node] = map[string]string{}
	}
	st.held[cluster][node][run] = how
}

func (st *historyState) unhold(cluster, node, run string) {
	delete(st.held[cluster][node], run)
	if len(st.held[cluster][node]) == 0 {
		delete(st.held[cluster], node)
	}
}

// holders describes who holds node in cluster, "" when nobody does.
func (st *historyState) holders(cluster, node string) string {
	var out []string
	for run, how := range st.held[cluster][node] {
		switch how {
		case holdChosen:
			out = append(out, "chosen by firing "+run+", no receipt yet")
		case holdAdmitted:
			out = append(out, "admitted by run "+run+", no receipt yet")
		default:
			out = append(out, "retained by run "+run+", not released")
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// checkFiringHistory replays the first-parent history in landing order
// and holds every firing to the branch as it was before the commit that
// added it (the firing's tip: firing-tip holds the two equal), which the
// decision read:
//
//   - each chosen node's due reason is real there (rule
//     firing-trigger-unproven): the run it names is the node's latest
//     finished run of the standing certification's profile
//     (evidence.LatestRuns over evidence.NodeRuns of every receipt
//     landed), and that run shows the reason (checkReasonShown);
//   - its in-use nodes include every pool node signet held there (rule
//     budget-exceeded): chosen by a firing or admitted by a run of the
//     cluster without receipt, or retained by a receipt without an
//     approved release.
//
// A firing that landed before the checkpoint the audit started from was
// judged by the audit that wrote it, which the state it restored carries
// on; only an identity reason waiting for its firing's admission then
// is proven here.
func (a *auditor) checkFiringHistory(runs map[string]*runAudit) {
	st := &a.hist
	st.init()
	const (
		evCheck = iota
		evClaim
		evAdmit
		evReceipt
		evRelease
	)
	type event struct {
		at, kind int
		r        *runAudit
	}
	var evs []event
	for _, r := range runs {
		h := r.hist
		if h == nil {
			continue
		}
		if h.firing != nil {
			evs = append(evs, event{h.firingAt, evCheck, r}, event{h.firingAt, evClaim, r})
		}
		if h.admittedAt >= 0 {
			evs = append(evs, event{h.admittedAt, evAdmit, r})
		}
		if h.receiptAt >= 0 {
			evs = append(evs, event{h.receiptAt, evReceipt, r})
		}
		if h.releaseAt >= 0 {
			evs = append(evs, event{h.releaseAt, evRelease, r})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		x, y := evs[i], evs[j]
		return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.kind, y.kind), cmp.Compare(x.r.dir, y.r.dir)) < 0
	})
	pending := map[string]map[string]evidence.NodeSnapshot{}
	for _, e := range evs {
		r, h := e.r, e.r.hist
		switch e.kind {
		case evCheck:
			a.checkFiringAtTip(r, st, pending)
		case evClaim:
			for _, c := range h.firing.Chosen {
				st.hold(r.cluster, c.Node, r.id, holdChosen)
			}
		case evAdmit:
			for _, n := range h.nodes {
				st.hold(r.cluster, n, r.id, holdAdmitted)
			}
		case evReceipt:
			for _, n := range h.nodes {
				st.unhold(r.cluster, n, r.id)
			}
			if h.firing != nil {
				for _, c := range h.firing.Chosen {
					st.unhold(r.cluster, c.Node, r.id)
				}
			}
			l := st.latestOf(r.cluster)
			for _, nr := range h.nodeRuns {
				l.Add(nr)
			}
			for _, n := range h.retained {
				if h.releaseAt < 0 || h.releaseAt > h.receiptAt || !slices.Contains(h.released, n) {
					st.hold(r.cluster, n, r.id, holdRetained)
				}
			}
		case evRelease:
			for _, n := range h.released {
				if st.held[r.cluster][n][r.id] == holdRetained {
					st.unhold(r.cluster, n, r.id)
				}
			}
		}
	}
	st.pending = pending
}

// checkFiringAtTip holds r's firing to st, the replay's state before the
// commit that added it; identity reasons of a firing not admitted yet
// are kept in pending until its admission proves them.
func (a *auditor) checkFiringAtTip(r *runAudit, st *historyState, pending map[string]map[string]evidence.NodeSnapshot) {
	h := r.hist
	fr := h.firing
	fail := func(rule, msg string) {
		a.add(Finding{Rule: rule, Cluster: r.cluster, Run: r.id, Path: path.Join(r.dir, evidence.FiringFile), Commit: r.firFile.landed.hash.String(), Message: msg})
	}
	identity := func(i int, was evidence.NodeSnapshot) {
		c := fr.Chosen[i]
		now, ok := h.snaps[c.Node]
		switch {
		case h.admittedAt < 0:
			if pending[r.dir] == nil {
				pending[r.dir] = map[string]evidence.NodeSnapshot{}
			}
			pending[r.dir][c.Node] = was
		case ok && len(evidence.IdentityChanges(was, now)) == 0:
			fail(RuleFiringTriggerUnproven, fmt.Sprintf("chosen[%d] %s: due reason identity, but the node's snapshot in run %s and its admission snapshot in this run agree in uid, systemUUID, bootID, kernel, gpuProduct and gpuDriver",
				i, c.Node, c.Reason.Run))
		}
	}
	if h.firingAt < a.baseLen {
		for i, c := range fr.Chosen {
			if was, ok := st.pending[r.dir][c.Node]; ok && c.Reason.Kind == evidence.DueIdentity {
				identity(i, was)
			}
		}
		return
	}
	spec := fr.StandingObject.Spec
	latest := st.latestOf(r.cluster)
	for i, c := range fr.Chosen {
		if reasonProblem(fr, i, r.id) != "" {
			continue // checkFiringReasons reports it
		}
		nr, ok := latest.Latest(spec.Profile, c.Node)
		if msg := reasonUnshown(spec, fr.FiredAt, c, nr, ok); msg != "" {
			fail(RuleFiringTriggerUnproven, fmt.Sprintf("chosen[%d] %s: %s", i, c.Node, msg))
			continue
		}
		if c.Reason.Kind == evidence.DueIdentity {
			identity(i, nr.Identity)
		}
	}
	inUse := map[string]bool{}
	for _, n := range fr.InUse {
		inUse[n] = true
	}
	var missing []string
	for _, p := range fr.Pool {
		if who := st.holders(r.cluster, p.Node); who != "" && !inUse[p.Node] {
			missing = append(missing, fmt.Sprintf("%s (%s)", p.Node, who))
			inUse[p.Node] = true
		}
	}
	if len(missing) > 0 {
		allowed := spec.Budget.Nodes(len(fr.Pool))
		fail(RuleBudgetExceeded, fmt.Sprintf("in-use nodes [%s] leave out pool nodes signet held at the firing's tip: %s; counting them, %d nodes in use and %d chosen, and the budget allows %d of a pool of %d",
			strings.Join(fr.InUse, ", "), strings.Join(missing, ", "), len(inUse), len(fr.Chosen), allowed, len(fr.Pool)))
	}
}

// reasonUnshown says why the node's latest finished run of the profile
// before the firing (nr; ok false when it has none) does not show chosen
// node c's due reason at firedAt, as reconciler/standing.Decide gives
// reasons; "" when it does. An identity reason is proven against the
// admission's snapshot (checkFiringAtTip).
func reasonUnshown(spec specs.StandingSpec, firedAt time.Time, c evidence.ChosenNode, nr evidence.NodeRun, ok bool) string {
	k := c.Reason.Kind
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case k == evidence.DueJoined && ok:
		return fmt.Sprintf("due reason joined, but run %s of profile %s covers the node (ended at %s)", nr.Run, spec.Profile, at(nr.EndedAt))
	case k == evidence.DueJoined:
		return ""
	case !ok:
		return fmt.Sprintf("due reason %s names run %s, but the node has no finished run of profile %s before the firing", k, c.Reason.Run, spec.Profile)
	case nr.Run != c.Reason.Run:
		return fmt.Sprintf("due reason %s names run %s, but the node's latest finished run of profile %s before the firing is %s", k, c.Reason.Run, spec.Profile, nr.Run)
	}
	switch k {
	case evidence.DueFailed:
		if nr.Verdict == specs.VerdictPass {
			return fmt.Sprintf("due reason failed, but run %s passed on the node", nr.Run)
		}
	case evidence.DueSchedule:
		every, _ := durationOf(spec.Every)
		if due := nr.EndedAt.Add(every); due.After(firedAt) {
			return fmt.Sprintf("due reason schedule, but run %s ended at %s: with every %s the node is due at %s, after the firing time %s", nr.Run, at(nr.EndedAt), spec.Every, at(due), at(firedAt))
		}
	case evidence.DueExpiry, evidence.DueExpired:
		before := time.Duration(0)
		if k == evidence.DueExpiry {
			before, _ = durationOf(spec.BeforeExpiry)
		}
		switch due := nr.CertifiedUntil.Add(-before); {
		case nr.CertifiedUntil.IsZero():
			return fmt.Sprintf("due reason %s, but run %s certified the node until no time (its receipt records no certifiedUntil for it)", k, nr.Run)
		case due.After(firedAt) && k == evidence.DueExpiry:
			return fmt.Sprintf("due reason expiry, but run %s certified the node until %s: with beforeExpiry %s it is due at %s, after the firing time %s", nr.Run, at(nr.CertifiedUntil), spec.BeforeExpiry, at(due), at(firedAt))
		case due.After(firedAt):
			return fmt.Sprintf("due reason expired, but run %s certified the node until %s, after the firing time %s", nr.Run, at(nr.CertifiedUntil), at(firedAt))
		}
	}
	return ""
}

func durationOf(i specs.Interval) (time.Duration, error) {
	if i == "" {
		return 0, nil
	}
	return i.Duration()
}

// encodeHistory writes st into a checkpoint's state:
//
//	Latest:  <cluster> <evidence.NodeRun as JSON, base64>
//	Held:    <cluster> <node> <run> <chosen|admitted|retained>
//	Pending: <run directory> <node> <evidence.NodeSnapshot as JSON, base64>
func encodeHistory(st *historyState, out *State) error {
	enc := func(v any) (string, error) {
		b, err := json.Marshal(v)
		return base64.StdEncoding.EncodeToString(b), err
	}
	for _, c := range sortedKeys(st.latest) {
		for _, nr := range st.latest[c].All() {
			s, err := enc(nr)
			if err != nil {
				return err
			}
			out.Latest = append(out.Latest, c+" "+s)
		}
	}
	for _, c := range sortedKeys(st.held) {
		for _, n := range sortedKeys(st.held[c]) {
			for _, run := range sortedKeys(st.held[c][n]) {
				out.Held = append(out.Held, strings.Join([]string{c, n, run, st.held[c][n][run]}, " "))
			}
		}
	}
	for _, dir := range sortedKeys(st.pending) {
		for _, n := range sortedKeys(st.pending[dir]) {
			s, err := enc(st.pending[dir][n])
			if err != nil {
				return err
			}
			out.Pending = append(out.Pending, dir+" "+n+" "+s)
		}
	}
	return nil
}

// decodeHistory restores the replay's state from a checkpoint's state,
// strictly: every line decodes, names a cluster, node and run once.
func (a *auditor) decodeHistory(name string, in *State) error {
	st := &a.hist
	st.init()
	bad := func(field string, i int, format string, args ...any) error {
		return checkpointErr(name, fmt.Sprintf("%s line %d", field, i+1), format, args...)
	}
	dec := func(s string, v any) error {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return err
		}
		return signing.StrictUnmarshal(b, v)
	}
	for i, line := range in.Latest {
		c, data, ok := strings.Cut(line, " ")
		var nr evidence.NodeRun
		if !ok || !evidence.IsDNSLabel(c) {
			return bad("state.latest", i, "%q is not a cluster and a node's run", line)
		}
		if err := dec(data, &nr); err != nil || nr.Run == "" || nr.Profile == "" || nr.Identity.Name == "" {
			return bad("state.latest", i, "a node's run of cluster %s does not decode (%v) or names no run, profile or node", c, err)
		}
		if _, dup := st.latestOf(c).Latest(nr.Profile, nr.Identity.Name); dup {
			return bad("state.latest", i, "node %s of profile %s in cluster %s appears twice", nr.Identity.Name, nr.Profile, c)
		}
		st.latestOf(c).Add(nr)
	}
	for i, line := range in.Held {
		f := strings.Split(line, " ")
		if len(f) != 4 || !evidence.IsDNSLabel(f[0]) || f[1] == "" || f[2] == "" || !slices.Contains([]string{holdChosen, holdAdmitted, holdRetained}, f[3]) {
			return bad("state.held", i, "%q is not a cluster, node, run and chosen, admitted or retained", line)
		}
		if _, dup := st.held[f[0]][f[1]][f[2]]; dup {
			return bad("state.held", i, "node %s held by run %s in cluster %s appears twice", f[1], f[2], f[0])
		}
		st.hold(f[0], f[1], f[2], f[3])
	}
	for i, line := range in.Pending {
		f := strings.SplitN(line, " ", 3)
		var rp evidence.RunPath
		ok := len(f) == 3
		if ok {
			rp, ok = evidence.ParsePath(f[0] + "/" + evidence.FiringFile)
		}
		if !ok || !rp.InRun() || rp.Dir() != f[0] || f[1] == "" {
			return bad("state.pending", i, "%q is not a run directory, a node and a snapshot", line)
		}
		var snap evidence.NodeSnapshot
		if err := dec(f[2], &snap); err != nil {
			return bad("state.pending", i, "snapshot of node %s does not decode: %v", f[1], err)
		}
		if _, dup := st.pending[f[0]][f[1]]; dup {
			return bad("state.pending", i, "node %s of %s appears twice", f[1], f[0])
		}
		if st.pending[f[0]] == nil {
			st.pending[f[0]] = map[string]evidence.NodeSnapshot{}
		}
		st.pending[f[0]][f[1]] = snap
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
