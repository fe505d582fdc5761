package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/report"
)

func init() { addCommand(newReportCmd) }

// reportOptions are the flags of signet report.
type reportOptions struct {
	Branch   branchOptions
	Trust    string
	Out      string
	PageSize int
	TTL      time.Duration
	Expiring time.Duration
	Grace    time.Duration
	Timeout  time.Duration
	Memory   memoryLimitOptions
	Progress progressOptions
}

// AddFlags registers the command's flags.
func (o *reportOptions) AddFlags(fs *pflag.FlagSet) {
	o.Branch.AddFlags(fs)
	fs.StringVar(&o.Trust, "trust", "", "trust policy file (required)")
	fs.StringVar(&o.Out, "out", "", "output directory, created when missing (required): DIR/index.html, the current generation DIR/gens/<id>/ and the one before it")
	fs.IntVar(&o.PageSize, "page-size", report.DefaultPageSize, "runs per index page")
	fs.DurationVar(&o.TTL, "ttl", report.DefaultTTL, "how long a Pass certifies a node on the report (negative: forever)")
	fs.DurationVar(&o.Expiring, "expiring-within", report.DefaultExpiring, "a certification ending within this long counts as expiring soon")
	fs.DurationVar(&o.Grace, "grace", audit.DefaultGrace, "how long past its run deadline a run may lack a receipt before the audit flags it")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up after this long; 0 for never (an audit of 10^5 runs takes tens of minutes)")
	o.Memory.AddFlags(fs)
	o.Progress.AddFlags(fs)
}

func newReportCmd() *cobra.Command {
	o := &reportOptions{}
	cmd := &cobra.Command{
		Use:   "report --trust FILE --out DIR",
		Short: "Write a static HTML report of an evidence branch, every number verified by the audit",
		Long: `Audit an evidence branch (as signet audit does) and write a static, self-contained
HTML site of it to --out: a fleet index (nodes certified, failing, retained and expiring
soon per cluster and profile; recent runs; the audit's findings), one page per run (the
node × check matrix with reasons, summaries, measurements, durations and log tails, who
approved it, and the stock-tool commands that re-verify it), per node and per profile.

A page is never written from a document the audit did not prove: a run that a finding
names is shown withheld, with the findings. The same branch gives the same bytes.

--out DIR is a directory, created (parents included) when missing. Each report is a new
generation, DIR/gens/<id>/ with a manifest.json of its files' digests, written whole and
then switched in: DIR/current links to it and DIR/index.html, the entry, leads into it,
so no reader sees a half-written report. A second report writes only the pages that
changed and hard-links the others; the generation it replaces stays until the report
after, for readers still in it. A report of the earlier flat layout in DIR
(DIR/manifest.json) has the files that manifest lists removed once the first generation
is switched in (directories they leave empty stay); nothing else in DIR is touched.
While one report writes DIR, a second one there fails on DIR/.lock (exit 2).
Prints the path of the entry, DIR/index.html.

Exit status: 0 clean, 1 the audit has findings (the report shows them), 2 usage error or
the branch could not be read.`,
		Example: "  signet report --trust trust.yaml --out report/\n  signet report --repo https://git.example.invalid/fleet/specs.git --trust trust.yaml --out /srv/signet-report",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func (o *reportOptions) run(cmd *cobra.Command) error {
	if err := o.Branch.validate(); err != nil {
		return err
	}
	if o.Out == "" {
		return &usageError{errors.New("required: --out")}
	}
	policy, err := loadPolicy(o.Trust)
	if err != nil {
		return err
	}
	if err := o.Progress.validate(); err != nil {
		return err
	}
	if err := o.Memory.apply(cmd.Flags()); err != nil {
		return err
	}
	ctx := cmd.Context()
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	res, err := report.Build(ctx, report.Options{Repo: o.Branch.Repo, Branch: o.Branch.Branch, Policy: policy, Out: o.Out,
		PageSize: o.PageSize, TTL: o.TTL, Expiring: o.Expiring, Grace: o.Grace, Progress: o.Progress.reporter(cmd.ErrOrStderr())})
	if err != nil {
		return exitCode(exitAuditUsage, fmt.Errorf("report: %w", err))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "report: %d files, %d written, %d removed; audit: %d finding(s)\n", res.Pages, res.Written, res.Removed, len(res.Audit.Findings))
	fmt.Fprintln(cmd.OutOrStdout(), res.Index)
	if !res.Audit.Clean() {
		return exitCode(exitAuditFindings, nil)
	}
	return nil
}
