package main

import (
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/evidence/audit"
)

func init() { addCommand(newLogsCmd) }

// logsOptions are the flags of signet logs.
type logsOptions struct {
	Branch  branchOptions
	Cluster string
	Trust   string
	Check   string
	Node    string
	Stream  string
	Timeout time.Duration
	Output  outputOptions
}

// AddFlags registers the command's flags.
func (o *logsOptions) AddFlags(fs *pflag.FlagSet) {
	o.Branch.AddFlags(fs)
	fs.StringVar(&o.Cluster, "cluster", "", "the run's cluster (default: whichever cluster's index holds the run ID)")
	fs.StringVar(&o.Trust, "trust", "", "trust policy file (required)")
	fs.StringVar(&o.Check, "check", "", "only this check's logs")
	fs.StringVar(&o.Node, "node", "", "only this node's logs")
	fs.StringVar(&o.Stream, "stream", "", "only this stream: stdout or stderr")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up after this long")
	o.Output.AddFlags(fs)
}

func newLogsCmd() *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs RUN --trust FILE [--check NAME] [--node NODE] [--stream stdout|stderr]",
		Short: "Print the recorded log tails of a run, verified against their check documents",
		Long: `Print the bounded log tails a run recorded on the evidence branch. The run is verified
first, as signet verify does, and a tail is printed only when a verified check document
binds it by digest; a run with any finding prints the findings and no log.

Exit status (signet help exit-codes): 0 printed, 1 the run has findings, 2 usage or
I/O error (the run could not be read, no log matches).`,
		Example: "  signet logs batch-7 --trust trust.yaml\n  signet logs batch-7 --trust trust.yaml --check nccl --node gpu-node-1 --stream stderr",
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// logTail is one recorded log tail.
type logTail struct {
	Index  int    `json:"index"`
	Check  string `json:"check"`
	Node   string `json:"node"`
	Stream string `json:"stream"`
	Path   string `json:"path"`
	Digest string `json:"digest"`
	Text   string `json:"text"`
}

func (o *logsOptions) run(cmd *cobra.Command, run string) error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if err := o.Branch.validate(); err != nil {
		return err
	}
	switch o.Stream {
	case "", "stdout", "stderr":
	default:
		return &usageError{fmt.Errorf("--stream %q: want stdout or stderr", o.Stream)}
	}
	policy, err := loadPolicy(o.Trust)
	if err != nil {
		return err
	}
	rep, docs, err := verifyRun(cmd.Context(), o.Timeout, audit.VerifyOptions{Repo: o.Branch.Repo, Branch: o.Branch.Branch, Cluster: o.Cluster, Run: run, Policy: policy})
	if err != nil {
		return err
	}
	if len(rep.Findings) > 0 {
		errw := cmd.ErrOrStderr()
		fmt.Fprintf(errw, "logs: run %s has %d finding(s); no log is printed from a run the audit did not prove:\n", run, len(rep.Findings))
		for _, f := range rep.Findings {
			fmt.Fprintf(errw, "  %s\n", f)
		}
		return exitCode(exitAuditFindings, nil)
	}
	tails := o.select_(docs)
	if len(tails) == 0 {
		return exitCode(exitUsage, fmt.Errorf("logs: no recorded log of run %s matches --check, --node and --stream", run))
	}
	w := cmd.OutOrStdout()
	if o.Output.JSON() {
		return o.Output.Write(w, tails)
	}
	printLogs(w, tails)
	return nil
}

// select_ lists the log tails the verified check documents of d bind, in
// check, node and stream order, that match the filters.
func (o *logsOptions) select_(d *audit.RunDocuments) []logTail {
	var out []logTail
	if d == nil {
		return nil
	}
	for i, ce := range d.Checks {
		if ce == nil || (o.Check != "" && ce.Check != o.Check) {
			continue
		}
		for _, po := range ce.Participants {
			if o.Node != "" && po.Node != o.Node {
				continue
			}
			for _, l := range po.Logs {
				stream := strings.TrimSuffix(strings.TrimPrefix(path.Base(l.Path), po.Node+"."), ".log")
				if o.Stream != "" && stream != o.Stream {
					continue
				}
				data, ok := d.Logs[d.Rel(l.Path)]
				if !ok {
					continue // not read equal to its digest: never printed
				}
				out = append(out, logTail{Index: i, Check: ce.Check, Node: po.Node, Stream: stream, Path: l.Path, Digest: string(l.Digest), Text: string(data)})
			}
		}
	}
	return out
}

func printLogs(w io.Writer, tails []logTail) {
	for i, t := range tails {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "==> %02d %s on %s, %s (%s) <==\n", t.Index, t.Check, t.Node, t.Stream, t.Digest)
		io.WriteString(w, t.Text)
		if t.Text != "" && !strings.HasSuffix(t.Text, "\n") {
			fmt.Fprintln(w)
		}
	}
}
