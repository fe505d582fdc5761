package main

import (
	"context"
	"fmt"
	"io"
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
)

func init() { addCommand(newStatusCmd) }

// statusOptions are the flags of signet status.
type statusOptions struct {
	Branch  branchOptions
	Cluster string
	Timeout time.Duration
	Output  outputOptions
}

// AddFlags registers the command's flags.
func (o *statusOptions) AddFlags(fs *pflag.FlagSet) {
	o.Branch.AddFlags(fs)
	fs.StringVar(&o.Cluster, "cluster", "", "only this cluster's runs (default: every cluster)")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up after this long")
	o.Output.AddFlags(fs)
}

func newStatusCmd() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status --repo R",
		Short: "List the runs of an evidence branch and each node's latest verdict",
		Long: `List the runs of an evidence branch (through its run-ID index) with their phase, derived
from which documents exist, their verdict and receipt sequence, and each node's latest
verdict. Status reads the branch's tip; it does not verify signatures or history: use
signet audit or signet verify for that.

Exit status: 0, or 2 when the branch could not be read.`,
		Example: "  signet status --repo .\n  signet status --repo https://git.example.invalid/fleet/specs.git -o yaml",
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
	st, err := audit.Status(ctx, audit.StatusOptions{Repo: o.Branch.Repo, Branch: o.Branch.Branch, Cluster: o.Cluster})
	if err != nil {
		return exitCode(exitAuditUsage, fmt.Errorf("could not read the evidence branch: %w", err))
	}
	w := cmd.OutOrStdout()
	if o.Output.JSON() {
		out := statusJSON{Repo: st.Repo, Branch: st.Branch, Tip: st.Tip, Runs: []runStatusJSON{}, Nodes: st.Nodes}
		now := time.Now()
		for _, r := range st.Runs {
			out.Runs = append(out.Runs, runStatusJSON{RunStatus: r, Conditions: runConditions(r, now)})
		}
		return o.Output.Write(w, out)
	}
	printStatus(w, st)
	return nil
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

func printStatus(w io.Writer, st *audit.BranchStatus) {
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
	if len(st.Nodes) > 0 {
		fmt.Fprintln(tw, "\nCLUSTER\tNODE\tLATEST VERDICT\tRUN\tAT")
		for _, n := range st.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Cluster, n.Node, n.Verdict, n.Run, n.At.UTC().Format(time.RFC3339))
		}
		tw.Flush()
	}
	for _, r := range st.Runs {
		if r.Problem != "" {
			fmt.Fprintf(w, "run %s: %s\n", r.Run, r.Problem)
		}
	}
}
