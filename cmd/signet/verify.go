package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/signing"
)

func init() { addCommand(newVerifyCmd) }

// verifyOptions are the flags of signet verify.
type verifyOptions struct {
	Branch  branchOptions
	Cluster string
	Trust   string
	Grace   time.Duration
	Timeout time.Duration
	KeyIDs  bool
	Output  outputOptions
}

// AddFlags registers the command's flags.
func (o *verifyOptions) AddFlags(fs *pflag.FlagSet) {
	o.Branch.AddFlags(fs)
	fs.StringVar(&o.Cluster, "cluster", "", "the run's cluster (default: whichever cluster's index holds the run ID)")
	fs.StringVar(&o.Trust, "trust", "", "trust policy file (required)")
	fs.DurationVar(&o.Grace, "grace", audit.DefaultGrace, "how long past its run deadline a run may lack a receipt before it is flagged")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.BoolVar(&o.KeyIDs, "key-ids", false, "print key ids beside the owners of signers and approvers")
	o.Output.AddFlags(fs)
}

func newVerifyCmd() *cobra.Command {
	o := &verifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify RUN --trust FILE",
		Short: "Verify one run on an evidence branch: its verdict, per check and per node, and every binding",
		Long: `Verify one run the way signet audit verifies every run: find it through the run-ID index,
replay the history of its directory since admission (commit signatures included), verify
every document against the trust policy, every digest binding, its lifecycle order, its
approvals and its receipt's links into the cluster's receipt chain.

A verified run also prints every check's outcome per node, from its verified check
document: the verdict's reason (exit code, deadline, missing or stale result…), the
script's summary and measurements, the duration and, for a non-Pass, the last lines of
its stderr. Signers and approvers are named by their owners in the trust policy.

Exit status: 0 verified, 1 findings, 2 usage error or the run could not be read.`,
		Example: "  signet verify batch-7 --trust trust.yaml --cluster east\n  signet verify batch-7 --repo https://git.example.invalid/fleet/specs.git --trust trust.yaml -o json",
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func (o *verifyOptions) run(cmd *cobra.Command, run string) error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if err := o.Branch.validate(); err != nil {
		return err
	}
	policy, err := loadPolicy(o.Trust)
	if err != nil {
		return err
	}
	rep, docs, err := verifyRun(cmd.Context(), o.Timeout, audit.VerifyOptions{
		Repo: o.Branch.Repo, Branch: o.Branch.Branch, Cluster: o.Cluster, Run: run, Policy: policy, Grace: o.Grace,
	})
	if err != nil {
		return err
	}
	// Outcomes only from a run the audit proved: with a finding, none.
	var outs []outcome
	if len(rep.Findings) == 0 {
		outs = outcomesOf(docs)
	}
	w := cmd.OutOrStdout()
	if o.Output.JSON() {
		if err := o.Output.Write(w, verifyJSON{RunReport: rep, Outcomes: outs}); err != nil {
			return err
		}
	} else {
		printVerify(w, rep, outs, policy, o.KeyIDs)
	}
	if len(rep.Findings) > 0 {
		return exitCode(exitAuditFindings, nil)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// verifyJSON is signet verify's JSON: the run's audit report and its
// outcomes.
type verifyJSON struct {
	*audit.RunReport
	Outcomes []outcome `json:"outcomes,omitempty"`
}

func printVerify(w io.Writer, r *audit.RunReport, outs []outcome, policy *signing.TrustPolicy, ids bool) {
	fmt.Fprintf(w, "run %s of cluster %s: %s (phase %s)\n", r.Run, r.Cluster, orDash(string(r.Verdict)), r.Phase)
	fmt.Fprintf(w, "directory %s\n", orDash(r.Dir))
	if r.Profile != "" {
		fmt.Fprintf(w, "profile %s, spec commit %s, admitted %s, deadline %s\n", r.Profile, shortRev(r.SpecCommit),
			r.AdmittedAt.UTC().Format(time.RFC3339), r.Deadline.UTC().Format(time.RFC3339))
	}
	if r.ReceiptSequence > 0 {
		fmt.Fprintf(w, "receipt #%d\n", r.ReceiptSequence)
	}
	if len(r.Signers) > 0 {
		fmt.Fprintf(w, "signed by %s\n", strings.Join(owners(policy, r.Signers, ids), ", "))
	}
	if len(r.Approvers) > 0 {
		fmt.Fprintf(w, "approved by %s\n", strings.Join(owners(policy, r.Approvers, ids), ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(r.Checks) > 0 {
		fmt.Fprintln(tw, "CHECK\tVERDICT\tNODES")
		for _, c := range r.Checks {
			v := orDash(string(c.Verdict))
			if c.Skipped {
				v += " (skipped)"
			}
			var nodes []string
			for _, p := range c.Participants {
				nodes = append(nodes, p.Node+"="+string(p.Verdict))
			}
			fmt.Fprintf(tw, "%02d %s\t%s\t%s\n", c.Index, c.Name, v, strings.Join(nodes, ","))
		}
		tw.Flush()
	}
	if len(r.Nodes) > 0 {
		fmt.Fprintln(tw, "NODE\tUID\tVERDICT")
		for _, n := range r.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n.Node, orDash(n.UID), orDash(string(n.Verdict)))
		}
		tw.Flush()
	}
	printOutcomes(w, outs)
	ok := 0
	for _, b := range r.Bindings {
		if b.OK {
			ok++
		}
	}
	fmt.Fprintf(w, "bindings: %d of %d hold\n", ok, len(r.Bindings))
	for _, b := range r.Bindings {
		mark := "ok  "
		if !b.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s -> %s %s\n", mark, b.From, b.To, b.Digest)
	}
	if len(r.Findings) == 0 {
		fmt.Fprintln(w, "verify: verified")
		return
	}
	fmt.Fprintf(w, "verify: %d finding(s)\n", len(r.Findings))
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %s\n", f)
	}
}

// verifyRun verifies one run as signet verify does (audit.Verify, bounded
// by timeout when positive) and returns its report with the documents the
// audit decoded and verified; an unreadable or ambiguous run is exitUsage.
func verifyRun(ctx context.Context, timeout time.Duration, vo audit.VerifyOptions) (*audit.RunReport, *audit.RunDocuments, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var docs *audit.RunDocuments
	vo.Observe = func(d *audit.RunDocuments) { docs = d }
	rep, err := audit.Verify(ctx, vo)
	if err != nil {
		if errors.Is(err, audit.ErrAmbiguousRun) {
			return nil, nil, exitCode(exitAuditUsage, fmt.Errorf("%w (pass --cluster)", err))
		}
		return nil, nil, exitCode(exitAuditUsage, fmt.Errorf("could not read run %s: %w", vo.Run, err))
	}
	return rep, docs, nil
}
