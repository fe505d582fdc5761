package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/renameio/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/pagetable"
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
	repoOptions // the repository holding the evidence branch (bare or not)
	Branch      string
}

// AddFlags registers --repo and --branch.
func (o *branchOptions) AddFlags(fs *pflag.FlagSet) {
	o.repoOptions.AddFlags(fs)
	fs.StringVar(&o.Branch, "branch", evidence.DefaultBranch, "evidence branch")
}

func (o *branchOptions) validate() error {
	if o.Repo == "" {
		return &usageError{errors.New("--repo is empty: give a directory or URL (the default is \".\", the current directory)")}
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
	// Checkpoint is a signed checkpoint to start from; WriteCheckpoint
	// where a clean audit writes its own, signed with CheckpointKey.
	Checkpoint      string
	WriteCheckpoint string
	CheckpointKey   string
	Passphrase      passphraseOptions
	Memory          memoryLimitOptions
	Progress        progressOptions
}

// AddFlags registers the command's flags.
func (o *auditOptions) AddFlags(fs *pflag.FlagSet) {
	o.Branch.AddFlags(fs)
	fs.StringVar(&o.Trust, "trust", "", "trust policy file (required)")
	fs.StringVar(&o.Since, "since", "", "a commit pinned earlier, or a pins file (lines \"<branch> <commit> [<time>]\", as a clean audit prints after \"pin:\"): the branch must descend from its pinned commit (detects a rewritten, force-pushed history)")
	fs.DurationVar(&o.Grace, "grace", audit.DefaultGrace, "how long past its run deadline a run may lack a receipt before it is flagged")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up after this long; 0 for never (an audit of 10^5 runs takes tens of minutes)")
	fs.StringVar(&o.Checkpoint, "checkpoint", "", "signed audit checkpoint to start from (written by --write-checkpoint, its state pages in FILE.pages): only the commits after its tip are read")
	fs.StringVar(&o.WriteCheckpoint, "write-checkpoint", "", "when the audit is clean, write a signed checkpoint of its end to this file and its state pages to FILE.pages (needs --checkpoint-key)")
	fs.StringVar(&o.CheckpointKey, "checkpoint-key", "", "private key signing the checkpoint: a key of the trust policy's spec.auditors")
	o.Passphrase.AddFlags(fs)
	o.Memory.AddFlags(fs)
	o.Progress.AddFlags(fs)
	o.Output.AddFlags(fs)
}

func newAuditCmd() *cobra.Command {
	o := &auditOptions{}
	cmd := &cobra.Command{
		Use:   "audit --trust FILE",
		Short: "Prove an evidence branch was never rewritten and every document is signed and bound",
		Long: `Audit an evidence branch offline: append-only first-parent history with commits signed
by evidence signers; every document signed by a key allowed to sign evidence and valid when
it was committed; every digest binding; lifecycle order and completeness of every run;
admissions, cancels and releases backed by approvals under the trust policy; the receipt
chain of every cluster; the run-ID index; and, with --since, that the branch descends from
a commit pinned earlier. Runs admitted without a receipt past their deadline are flagged.

--write-checkpoint FILE --checkpoint-key KEY makes a clean audit write a checkpoint: its tip
and the state the whole-branch rules continue from, signed by a key of the trust policy's
auditors (never an evidence signer). The state's tables are pages in FILE.pages/, named by
their digests in FILE: keep the two together. --checkpoint FILE starts the next audit there:
the checkpoint must verify with an auditor key valid now, name this branch and this trust
policy, and its tip must be on the branch's first-parent history, or nothing is audited
(exit 2); then only the commits after its tip are read, the pages of the keys they touch are
read and checked against their digests (one missing or changed: exit 2), and the runs still
open at it are checked again. A commit after the tip that changes or deletes a file makes
the audit read the whole branch ("checkpoint not used: ..."). A full audit (without
--checkpoint) reports the same findings. The next checkpoint links the pages it keeps from
the one it started from, and pages in its own directory that it does not name are removed.

A clean audit ends with the tip to pin ("pin: <branch> <commit> <time>"): keep that line
in a pins file for the next audit's --since, and give the commit to the reconciler
(evidence.pinnedTip). --since takes a commit (40 hex or a revision) or a pins file, one
"<branch> <commit> [<time>]" per line ('#' comments); a file must pin the audited branch.

An audit of 10^5 runs takes tens of minutes: it prints how far it has come to stderr at
most every --progress-interval (the first line only after that long), and runs until done
unless --timeout says otherwise.

Every finding names its rule, run and path. Exit status: 0 clean, 1 findings,
2 usage error or the branch could not be read.`,
		Example: "  signet audit --repo https://git.example.invalid/fleet/specs.git --trust trust.yaml\n" +
			"  signet audit --repo . --trust trust.yaml --since pins.txt -o json\n" +
			"  signet audit --repo . --trust trust.yaml --checkpoint last.ckpt --write-checkpoint next.ckpt --checkpoint-key auditor.key --passphrase-env SIGNET_PASSPHRASE",
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
	since, err := o.since()
	if err != nil {
		return err
	}
	opts := audit.Options{
		Repo: o.Branch.Repo, Branch: o.Branch.Branch, Policy: policy, Since: since, Grace: o.Grace,
		Progress: o.Progress.reporter(cmd.ErrOrStderr()),
	}
	if err := o.checkpointOptions(&opts, policy); err != nil {
		return err
	}
	rep, err := audit.Branch(ctx, opts)
	if errors.Is(err, audit.ErrCheckpoint) {
		return exitCode(exitAuditUsage, fmt.Errorf("--checkpoint: %w", err))
	}
	if err != nil {
		return exitCode(exitAuditUsage, fmt.Errorf("could not read the evidence branch: %w", err))
	}
	if rep.Checkpoint != nil {
		// Its pages are written (rep.CheckpointPages) and made durable
		// before the checkpoint that names them; then the pages it does
		// not name go.
		if d, ok := opts.WritePages.(*pagetable.DirStore); ok {
			if err := d.Sync(); err != nil {
				return exitCode(exitAuditUsage, fmt.Errorf("--write-checkpoint: %w", err))
			}
		}
		if err := renameio.WriteFile(o.WriteCheckpoint, rep.Checkpoint, 0o644, renameio.WithStaticPermissions(0o644)); err != nil {
			return exitCode(exitAuditUsage, fmt.Errorf("--write-checkpoint: %w", err))
		}
		if err := prunePages(o.WriteCheckpoint, rep.Checkpoint); err != nil {
			return exitCode(exitAuditUsage, fmt.Errorf("--write-checkpoint: %w", err))
		}
	}
	w := cmd.OutOrStdout()
	if o.Output.JSON() {
		if err := o.Output.Write(w, rep); err != nil {
			return err
		}
	} else {
		printAudit(w, rep)
		if rep.Checkpoint != nil {
			fmt.Fprintf(w, "checkpoint: %s\n", o.WriteCheckpoint)
		}
	}
	if !rep.Clean() {
		return exitCode(exitAuditFindings, nil)
	}
	return nil
}

// checkpointOptions reads --checkpoint and the key of --checkpoint-key
// into opts. The key must be an auditor of policy: a checkpoint signed by
// another would be refused by the next audit.
func (o *auditOptions) checkpointOptions(opts *audit.Options, policy *signing.TrustPolicy) error {
	if o.Checkpoint != "" {
		b, err := os.ReadFile(o.Checkpoint)
		if err != nil {
			return exitCode(exitAuditUsage, fmt.Errorf("--checkpoint: %w", err))
		}
		opts.Checkpoint, opts.CheckpointName = b, o.Checkpoint
		opts.CheckpointPages = &pagetable.DirStore{Dir: pagesDir(o.Checkpoint)}
	}
	if (o.WriteCheckpoint == "") != (o.CheckpointKey == "") {
		return &usageError{errors.New("--write-checkpoint and --checkpoint-key go together")}
	}
	if o.CheckpointKey == "" {
		return nil
	}
	pass, err := o.Passphrase.Read()
	if err != nil {
		return exitCode(exitAuditUsage, err)
	}
	key, err := signing.LoadPrivateKey(o.CheckpointKey, pass)
	if err != nil {
		return exitCode(exitAuditUsage, fmt.Errorf("--checkpoint-key: %w", err))
	}
	if !slices.ContainsFunc(policy.Auditors(), func(k *signing.PublicKey) bool { return k.KeyID() == key.KeyID() }) {
		return exitCode(exitAuditUsage, fmt.Errorf("--checkpoint-key: %s: key %s is not in the trust policy's spec.auditors, so no audit would accept its checkpoint", o.CheckpointKey, shortRev(key.KeyID())))
	}
	opts.CheckpointKey = key
	if opts.WritePages, err = pagetable.NewDirStore(pagesDir(o.WriteCheckpoint)); err != nil {
		return exitCode(exitAuditUsage, fmt.Errorf("--write-checkpoint: %w", err))
	}
	return nil
}

// pagesDir is the directory of the state pages of the checkpoint at
// name: name.pages beside it.
func pagesDir(name string) string { return name + ".pages" }

// prunePages removes from the pages directory of the checkpoint written
// at name the pages it does not name: those of the checkpoint it
// replaced, or of an audit that failed before writing it. Only files
// named as pages are touched.
func prunePages(name string, checkpoint []byte) error {
	dir := pagesDir(name)
	digests, err := audit.CheckpointPages(checkpoint, &pagetable.DirStore{Dir: dir})
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, d := range digests {
		keep[d] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if n := e.Name(); len(n) == 64 && !keep[n] && strings.Trim(n, "0123456789abcdef") == "" {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
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
	if rep.From != nil {
		fmt.Fprintf(w, "from checkpoint at %s (audited %s, signed by %s): what follows counts what came after it\n",
			shortRev(rep.From.Tip), rep.From.AuditedAt.UTC().Format(time.RFC3339), strings.Join(shortRevs(rep.From.Signers), ", "))
	}
	if rep.FullAudit != "" {
		fmt.Fprintf(w, "checkpoint not used: %s\n", rep.FullAudit)
	}
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

func shortRevs(revs []string) []string {
	out := make([]string, len(revs))
	for i, r := range revs {
		out[i] = shortRev(r)
	}
	return out
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
