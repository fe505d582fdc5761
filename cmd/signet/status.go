package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

func init() { addCommand(newStatusCmd) }

// statusOptions are the flags of signet status.
type statusOptions struct {
	Branch  branchOptions
	Cluster string
	Node    string
	Profile string
	Verdict string
	Since   string
	Limit   int
	// Reconcilers are the status addresses of daemons to ask for the
	// requests they have not admitted (waiting for approval or nodes).
	Reconcilers []string
	Timeout     time.Duration
	Output      outputOptions
}

// AddFlags registers the command's flags.
func (o *statusOptions) AddFlags(fs *pflag.FlagSet) {
	o.Branch.AddFlags(fs)
	fs.StringVar(&o.Cluster, "cluster", "", "only this cluster's runs (default: every cluster)")
	fs.StringVar(&o.Node, "node", "", "only runs and nodes of this node")
	fs.StringVar(&o.Profile, "profile", "", "only runs of this profile")
	fs.StringVar(&o.Verdict, "verdict", "", "only runs with this verdict (Pass, Fail, Error, Inconclusive, Canceled; none: still open)")
	fs.StringVar(&o.Since, "since", "", "only runs admitted since this time (RFC 3339) or this long ago (24h)")
	fs.IntVar(&o.Limit, "limit", 0, "only the newest N runs (0: all)")
	fs.StringArrayVar(&o.Reconcilers, "reconciler", nil, "a reconciler daemon's status address (its listen, e.g. http://127.0.0.1:8080), repeatable: also list the requests it has not admitted, waiting for an approval or for nodes")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up after this long")
	o.Output.AddFlags(fs)
}

func newStatusCmd() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the runs of an evidence branch and each node's latest verdict",
		Long: `List the runs of an evidence branch (through its run-ID index) with their phase, derived
from which documents exist, their verdict and receipt sequence, and each node's latest
verdict, the runs still open and the nodes retained until an approved release. --node,
--profile, --verdict, --since and --limit narrow the runs listed (the nodes' latest
verdicts are over every run). Status reads the branch's tip; it does not verify
signatures or history: use signet audit or signet verify for that.

Requests that are not admitted leave nothing on the branch: only the reconciler that
decided knows why. With --reconciler (repeatable, one per daemon), status asks each
daemon's GET /status and lists the requests waiting for an approval (which threshold or
approval is missing) or for nodes (which node is held by which run, or not eligible),
in the words of its admission gates. It also lists the certification labels each
daemon's cluster carries now (kubernetes.certifyTTL): the node table gains a CERTIFIED
UNTIL column with the expiry, profile and run; "-" for a node with no certification
that holds (none, expired, or its identity changed).
Runs that did not pass list each check that did not pass with its verdict and reason.

Exit status: 0, or 2 when the branch or a reconciler's status could not be read.`,
		Example: "  signet status\n  signet status --repo https://git.example.invalid/fleet/specs.git -o yaml\n" +
			"  signet status --reconciler http://127.0.0.1:8080",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// statusJSON is the --output json form: the branch status with
// Kubernetes-style conditions per run.
type statusJSON struct {
	Repo   string             `json:"repo"`
	Branch string             `json:"branch"`
	Tip    string             `json:"tip"`
	Runs   []runStatusJSON    `json:"runs"`
	Nodes  []audit.NodeStatus `json:"nodes"`
	// Retained are the nodes a finished, non-Pass run still holds until
	// an approved release (of the runs listed).
	Retained []retainedNode `json:"retained,omitempty"`
	// Waiting are the requests the --reconciler daemons have not
	// admitted, waiting for an approval or for nodes.
	Waiting []reconciler.WaitingRequest `json:"waiting,omitempty"`
	// Certified are the certification labels the --reconciler daemons'
	// clusters carry now, with their expiry.
	Certified []certifiedNode `json:"certified,omitempty"`
	// Standing are the --reconciler daemons' standing certifications:
	// pool coverage, budget in use and next due time.
	Standing []reconciler.StandingRow `json:"standing,omitempty"`
}

// certifiedNode is a node's certification label set as a daemon reads it
// from its cluster.
type certifiedNode struct {
	Cluster string `json:"cluster"`
	reconciler.CertifiedNode
}

// retainedNode is a node a finished run retains.
type retainedNode struct {
	Cluster string        `json:"cluster"`
	Node    string        `json:"node"`
	Run     string        `json:"run"`
	Verdict specs.Verdict `json:"verdict"`
}

type runStatusJSON struct {
	audit.RunStatus
	Conditions []metav1.Condition `json:"conditions"`
}

func (o *statusOptions) run(cmd *cobra.Command) error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if err := o.Branch.validate(); err != nil {
		return err
	}
	ctx := cmd.Context()
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	now := time.Now()
	since, err := parseSince(o.Since, now)
	if err != nil {
		return &usageError{err}
	}
	st, err := audit.Status(ctx, audit.StatusOptions{Repo: o.Branch.Repo, Branch: o.Branch.Branch, Cluster: o.Cluster})
	if err != nil {
		return exitCode(exitAuditUsage, fmt.Errorf("could not read the evidence branch: %w", err))
	}
	o.filter(st, since)
	retained := retainedNodes(st.Runs)
	var waiting []reconciler.WaitingRequest
	var standings []reconciler.StandingRow
	var certified []certifiedNode
	for _, addr := range o.Reconcilers {
		ds, err := daemonStatus(ctx, addr)
		if err != nil {
			return exitCode(exitAuditUsage, err)
		}
		waiting = append(waiting, reconciler.Waiting(*ds)...)
		standings = append(standings, reconciler.Standings(*ds)...)
		for _, c := range ds.Certified {
			certified = append(certified, certifiedNode{Cluster: ds.Cluster, CertifiedNode: c})
		}
		if ds.CertifiedError != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: --reconciler %q: certification labels not all read: %s\n", addr, ds.CertifiedError)
		}
	}
	w := cmd.OutOrStdout()
	if o.Output.JSON() {
		out := statusJSON{Repo: st.Repo, Branch: st.Branch, Tip: st.Tip, Runs: []runStatusJSON{}, Nodes: st.Nodes, Retained: retained, Waiting: waiting, Certified: certified, Standing: standings}
		for _, r := range st.Runs {
			out.Runs = append(out.Runs, runStatusJSON{RunStatus: r, Conditions: runConditions(r, now)})
		}
		return o.Output.Write(w, out)
	}
	var labels map[string]certifiedNode
	if len(o.Reconcilers) > 0 {
		labels = map[string]certifiedNode{}
		for _, c := range certified {
			labels[c.Cluster+"/"+c.Node] = c
		}
	}
	printStatus(w, st, retained, labels)
	printWaiting(w, waiting)
	printStandings(w, standings)
	return nil
}

// printStandings lists the standing certifications: pool coverage,
// budget in use of allowed, the next due time and the last firing; one
// that is not Ready shows its reason instead.
func printStandings(w io.Writer, rows []reconciler.StandingRow) {
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCLUSTER\tSTANDING\tREADY\tPOOL\tCERTIFIED\tEXPIRING\tFAILED\tNEVER\tBUDGET\tNEXT DUE\tLAST FIRING")
	for _, r := range rows {
		if r.StandingStatus == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s: %s\t\t\t\t\t\t\t\t\n", r.Cluster, r.Name, r.Reason, r.Message)
			continue
		}
		next := "-"
		if !r.Next.IsZero() {
			next = r.Next.UTC().Format(time.RFC3339)
		}
		last := r.LastFiring
		if last == "" {
			last = "-"
		}
		ready := "True"
		if !r.Ready {
			ready = r.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%s\t%s\n", r.Cluster, r.Name, ready, r.Pool, r.Certified, r.Expiring, r.Failed, r.Never, r.InUse, r.Allowed, next, last)
	}
	tw.Flush()
}

// maxDaemonStatus bounds the /status answer signet status reads.
const maxDaemonStatus = 64 << 20

// daemonStatus reads GET /status of the reconciler daemon at addr (a URL,
// or host:port for http).
func daemonStatus(ctx context.Context, addr string) (*reconciler.Status, error) {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimSuffix(base, "/") + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("--reconciler %q: %w", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--reconciler %q: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("--reconciler %q: GET %s answered %s", addr, u, resp.Status)
	}
	var st reconciler.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDaemonStatus)).Decode(&st); err != nil {
		return nil, fmt.Errorf("--reconciler %q: GET %s: not a reconciler status: %w", addr, u, err)
	}
	return &st, nil
}

// printWaiting lists the requests waiting for an approval or for nodes.
func printWaiting(w io.Writer, waiting []reconciler.WaitingRequest) {
	if len(waiting) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCLUSTER\tWAITING REQUEST\tFOR\tREASON\tDETAIL")
	for _, r := range waiting {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Cluster, r.Request, r.For, r.Reason, r.Message)
	}
	tw.Flush()
}

// parseSince reads --since: an RFC 3339 time, or a duration before now;
// zero when empty.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time or a duration such as 24h", v)
	}
	return now.Add(-d), nil
}

// filter keeps the runs (and nodes) the filters name, the newest Limit.
func (o *statusOptions) filter(st *audit.BranchStatus, since time.Time) {
	var runs []audit.RunStatus
	for _, r := range st.Runs {
		if o.Profile != "" && r.Profile != o.Profile {
			continue
		}
		if o.Verdict != "" && !strings.EqualFold(string(r.Verdict), o.Verdict) && !(o.Verdict == "none" && r.Verdict == "") {
			continue
		}
		if !since.IsZero() && r.AdmittedAt.Before(since) {
			continue
		}
		if o.Node != "" && !slices.ContainsFunc(r.Nodes, func(n audit.NodeReport) bool { return n.Node == o.Node }) {
			continue
		}
		runs = append(runs, r)
	}
	if o.Limit > 0 && len(runs) > o.Limit {
		sorted := slices.Clone(runs)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].AdmittedAt.After(sorted[j].AdmittedAt) })
		keep := map[string]bool{}
		for _, r := range sorted[:o.Limit] {
			keep[r.Dir] = true
		}
		runs = slices.DeleteFunc(runs, func(r audit.RunStatus) bool { return !keep[r.Dir] })
	}
	st.Runs = runs
	if o.Node != "" {
		st.Nodes = slices.DeleteFunc(st.Nodes, func(n audit.NodeStatus) bool { return n.Node != o.Node })
	}
}

// retainedNodes are the non-Pass nodes of finished runs without an
// approved release.
func retainedNodes(runs []audit.RunStatus) []retainedNode {
	var out []retainedNode
	for _, r := range runs {
		if r.Phase != evidence.PhaseDone || r.Released {
			continue
		}
		for _, n := range r.Nodes {
			if n.Verdict != specs.VerdictPass {
				out = append(out, retainedNode{Cluster: r.Cluster, Node: n.Node, Run: r.Run, Verdict: n.Verdict})
			}
		}
	}
	return out
}

// runConditions derives Ready/Reconciling/Stalled conditions (fluxcd
// meta types and reasons) from what the branch holds for a run, as the
// daemon's /status does (reconciler.RunConditions: Ready only for a Pass,
// Stalled with reason Failed for another verdict, Reconciling before the
// receipt), and Stalled when a document is unreadable or the run is past
// its deadline without a receipt.
func runConditions(r audit.RunStatus, now time.Time) []metav1.Condition {
	t := metav1.NewTime(now)
	cond := func(typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, LastTransitionTime: t}
	}
	switch {
	case r.Problem != "":
		return []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionFalse, meta.FailedReason, r.Problem),
			cond(meta.StalledCondition, metav1.ConditionTrue, meta.FailedReason, r.Problem),
		}
	case r.Phase == evidence.PhaseDone:
		return reconciler.RunConditions(r.Run, r.Phase, r.Verdict, now)
	case !r.Deadline.IsZero() && now.After(r.Deadline.Add(audit.DefaultGrace)):
		msg := fmt.Sprintf("no receipt past the run deadline %s (phase %s)", r.Deadline.UTC().Format(time.RFC3339), r.Phase)
		return []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionFalse, "DeadlineExceeded", msg),
			cond(meta.StalledCondition, metav1.ConditionTrue, "DeadlineExceeded", msg),
		}
	}
	return reconciler.RunConditions(r.Run, r.Phase, r.Verdict, now)
}

// printNotPassed lists, for every run that did not pass, each check that
// did not pass with its verdict and reason (issue 16: reasons in every
// view), and where to read summaries and logs. Skipped checks of a canceled
// run are listed as skipped; checks with no verdict yet (an open run) are
// left out.
func printNotPassed(tw *tabwriter.Writer, runs []audit.RunStatus) {
	header := false
	for _, r := range runs {
		if r.Verdict == "" || r.Verdict == specs.VerdictPass {
			continue
		}
		for _, c := range r.Checks {
			if c.Verdict == specs.VerdictPass || (c.Verdict == "" && !c.Skipped) {
				continue
			}
			if !header {
				fmt.Fprintln(tw, "\nCLUSTER\tRUN\tCHECK\tVERDICT\tREASON")
				header = true
			}
			verdict, reason := string(c.Verdict), orDash(c.Reason)
			if c.Skipped {
				verdict, reason = orDash(verdict)+" (skipped)", "not run: the run ended before this check started"
			}
			fmt.Fprintf(tw, "%s\t%s\t%02d %s\t%s\t%s\n", r.Cluster, r.Run, c.Index, c.Name, verdict, oneLine(reason))
		}
	}
	if header {
		tw.Flush()
		fmt.Fprintln(tw, "summaries, measurements and log tails: signet verify RUN; whole logs: signet logs RUN")
		tw.Flush()
	}
}

// oneLine keeps a reason on one table row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// printStatus writes the text view. labels, when not nil (a daemon was
// asked), adds each node's certification label expiry, keyed by
// cluster/node.
func printStatus(w io.Writer, st *audit.BranchStatus, retained []retainedNode, labels map[string]certifiedNode) {
	fmt.Fprintf(w, "evidence branch %s of %s at %s\n", st.Branch, st.Repo, shortRev(st.Tip))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tRUN\tPHASE\tVERDICT\tRECEIPT\tADMITTED\tNODES")
	for _, r := range st.Runs {
		seq := "-"
		if r.ReceiptSequence > 0 {
			seq = fmt.Sprintf("#%d", r.ReceiptSequence)
		}
		var nodes []string
		for _, n := range r.Nodes {
			nodes = append(nodes, n.Node)
		}
		adm := "-"
		if !r.AdmittedAt.IsZero() {
			adm = r.AdmittedAt.UTC().Format(time.RFC3339)
		}
		phase := r.Phase
		if r.Canceled {
			phase += " (canceled)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Cluster, r.Run, phase, orDash(string(r.Verdict)), seq, adm, strings.Join(nodes, ","))
	}
	tw.Flush()
	printNotPassed(tw, st.Runs)
	if len(st.Nodes) > 0 {
		if labels == nil {
			fmt.Fprintln(tw, "\nCLUSTER\tNODE\tLATEST VERDICT\tRUN\tAT")
		} else {
			fmt.Fprintln(tw, "\nCLUSTER\tNODE\tLATEST VERDICT\tRUN\tAT\tCERTIFIED UNTIL")
		}
		for _, n := range st.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", n.Cluster, n.Node, n.Verdict, n.Run, n.At.UTC().Format(time.RFC3339))
			if labels != nil {
				until := "-"
				if c, ok := labels[n.Cluster+"/"+n.Node]; ok {
					until = fmt.Sprintf("%s (%s, run %s)", c.Until.UTC().Format(time.RFC3339), c.Profile, c.Run)
				}
				fmt.Fprintf(tw, "\t%s", until)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	var open []string
	for _, r := range st.Runs {
		if r.Phase != evidence.PhaseDone {
			open = append(open, fmt.Sprintf("%s/%s (%s)", r.Cluster, r.Run, r.Phase))
		}
	}
	if len(open) > 0 {
		fmt.Fprintf(w, "\nopen runs: %s\n", strings.Join(open, ", "))
	}
	if len(retained) > 0 {
		fmt.Fprintln(tw, "\nRETAINED UNTIL AN APPROVED RELEASE\tRUN\tVERDICT")
		for _, n := range retained {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\n", n.Cluster, n.Node, n.Run, n.Verdict)
		}
		tw.Flush()
	}
	for _, r := range st.Runs {
		if r.Problem != "" {
			fmt.Fprintf(w, "run %s: %s\n", r.Run, r.Problem)
		}
	}
}
