package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/signing"
)

func init() { addCommand(newAuditCmd) }

// Exit codes of signet audit and signet verify.
const (
	exitAuditClean    = exitOK
	exitAuditFindings = exitFindings
	exitAuditUsage    = exitUsage
)

// branchOptions name an evidence branch to read.
type branchOptions struct {
	Repo   string
	Branch string
}

// AddFlags registers --repo and --branch.
func (o *branchOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Repo, "repo", "", "repository holding the evidence branch: a local path (bare or not) or a file://, http(s):// or ssh:// URL (required)")
	fs.StringVar(&o.Branch, "branch", evidence.DefaultBranch, "evidence branch")
}

func (o *branchOptions) validate() error {
	if o.Repo == "" {
		return &usageError{errors.New("required: --repo")}
	}
	return nil
}

// auditOptions are the flags of signet audit.
type auditOptions struct {
	Branch  branchOptions
	Trust   string
	Since   string
	Grace   time.Duration
	Timeout time.Duration
	Output  outputOptions
}

// AddFlags registers the command's flags.
func (o *auditOptions) AddFlags(fs *pflag.FlagSet) {
	o.Branch.AddFlags(fs)
	fs.StringVar(&o.Trust, "trust", "", "trust policy file (required)")
	fs.StringVar(&o.Since, "since", "", "a commit pinned earlier, or a pins file (lines \"<branch> <commit> [<time>]\", as a clean audit prints after \"pin:\"): the branch must descend from its pinned commit (detects a rewritten, force-pushed history)")
	fs.DurationVar(&o.Grace, "grace", audit.DefaultGrace, "how long past its run deadline a run may lack a receipt before it is flagged")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "give up after this long")
	o.Output.AddFlags(fs)
}

func newAuditCmd() *cobra.Command {
	o := &auditOptions{}
	cmd := &cobra.Command{
		Use:   "audit --repo R --trust FILE",
		Short: "Prove an evidence branch was never rewritten and every document is signed and bound",
		Long: `Audit an evidence branch offline: append-only first-parent history with commits signed
by evidence signers; every document signed by a key allowed to sign evidence and valid when
it was committed; every digest binding; lifecycle order and completeness of every run;
admissions, cancels and releases backed by approvals under the trust policy; the receipt
chain of every cluster; the run-ID index; and, with --since, that the branch descends from
a commit pinned earlier. Runs admitted without a receipt past their deadline are flagged.

A clean audit ends with the tip to pin ("pin: <branch> <commit> <time>"): keep that line
in a pins file for the next audit's --since, and give the commit to the reconciler
(evidence.pinnedTip). --since takes a commit (40 hex or a revision) or a pins file, one
"<branch> <commit> [<time>]" per line ('#' comments); a file must pin the audited branch.

Every finding names its rule, run and path. Exit status: 0 clean, 1 findings,
2 usage error or the branch could not be read.`,
		Example: "  signet audit --repo https://git.example.invalid/fleet/specs.git --trust trust.yaml\n" +
			"  signet audit --repo . --trust trust.yaml --since pins.txt -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// loadPolicy reads --trust; a missing flag is a usage error.
func loadPolicy(file string) (*signing.TrustPolicy, error) {
	if file == "" {
		return nil, &usageError{errors.New("required: --trust")}
	}
	p, err := signing.LoadTrustPolicy(file)
	if err != nil {
		return nil, exitCode(exitAuditUsage, err)
	}
	return p, nil
}

func (o *auditOptions) run(cmd *cobra.Command) error {
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
	ctx := cmd.Context()
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	since, err := o.since()
	if err != nil {
		return err
	}
	rep, err := audit.Branch(ctx, audit.Options{
		Repo: o.Branch.Repo, Branch: o.Branch.Branch, Policy: policy, Since: since, Grace: o.Grace,
	})
	if err != nil {
		return exitCode(exitAuditUsage, fmt.Errorf("could not read the evidence branch: %w", err))
	}
	w := cmd.OutOrStdout()
	if o.Output.JSON() {
		if err := o.Output.Write(w, rep); err != nil {
			return err
		}
	} else {
		printAudit(w, rep)
	}
	if !rep.Clean() {
		return exitCode(exitAuditFindings, nil)
	}
	return nil
}

// since resolves --since: a commit hash as is; a regular file as a pins
// file, which must pin the audited branch; anything else a revision.
func (o *auditOptions) since() (string, error) {
	if o.Since == "" || evidence.IsCommitHash(o.Since) {
		return o.Since, nil
	}
	fi, err := os.Stat(o.Since)
	if err != nil || !fi.Mode().IsRegular() {
		return o.Since, nil
	}
	b, err := os.ReadFile(o.Since)
	if err != nil {
		return "", exitCode(exitAuditUsage, fmt.Errorf("--since: %w", err))
	}
	pins, err := audit.ParsePins(o.Since, b)
	if err != nil {
		return "", exitCode(exitAuditUsage, fmt.Errorf("--since: %w", err))
	}
	c, ok := pins[o.Branch.Branch]
	if !ok {
		return "", exitCode(exitAuditUsage, fmt.Errorf("--since: %s pins no tip of branch %s", o.Since, o.Branch.Branch))
	}
	return c, nil
}

func printAudit(w io.Writer, rep *audit.Report) {
	fmt.Fprintf(w, "evidence branch %s of %s at %s\n", rep.Branch, rep.Repo, shortRev(rep.Tip))
	fmt.Fprintf(w, "trust policy %s\n", rep.TrustPolicyDigest)
	fmt.Fprintf(w, "%d commits, %d files, %d signed documents, %d runs\n", rep.Commits, rep.Files, rep.Documents, len(rep.Runs))
	if len(rep.Runs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tRUN\tPHASE\tVERDICT\tRECEIPT\tNODES")
		for _, r := range rep.Runs {
			seq := "-"
			if r.ReceiptSequence > 0 {
				seq = fmt.Sprintf("#%d", r.ReceiptSequence)
			}
			var nodes []string
			for _, n := range r.Nodes {
				v := string(n.Verdict)
				if v == "" {
					v = "?"
				}
				nodes = append(nodes, n.Node+"="+v)
			}
			v := string(r.Verdict)
			if v == "" {
				v = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Cluster, r.Run, r.Phase, v, seq, strings.Join(nodes, ","))
		}
		tw.Flush()
	}
	if rep.Clean() {
		fmt.Fprintln(w, "audit: clean")
		if rep.Pin != nil {
			fmt.Fprintf(w, "pin: %s\n", rep.Pin)
		}
		return
	}
	fmt.Fprintf(w, "audit: %d finding(s)\n", len(rep.Findings))
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "  %s\n", f)
	}
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
