package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

func init() { addCommand(newRunCmd) }

type runOptions struct {
	Repo           string
	Branch         string
	Path           string
	Request        string
	Trust          string
	Key            string
	PassphraseFile string
	PassphraseEnv  string
	Cluster        string
	StateDir       string
	EvidenceBranch string
	UIDRange       string
	Timeout        time.Duration
	Verbose        bool
	AcceptTip      bool
	PinnedTip      string
	out            outputOptions
}

func (o *runOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Repo, "repo", ".", repoUsage)
	fs.StringVar(&o.Branch, "branch", "", "spec branch (default: the repository's current branch)")
	fs.StringVar(&o.Path, "path", ".", "spec path inside the repository")
	fs.StringVar(&o.Request, "request", "", "name of the CertificationRequest to run (required)")
	fs.StringVar(&o.Trust, "trust", "", "trust policy file (required)")
	fs.StringVar(&o.Key, "key", "", "the reconciler's private signing key (required)")
	fs.StringVar(&o.PassphraseFile, "passphrase-file", "", "file holding the key's passphrase")
	fs.StringVar(&o.PassphraseEnv, "passphrase-env", "", "environment variable holding the key's passphrase")
	fs.StringVar(&o.Cluster, "cluster", "local", "cluster name for run IDs and evidence paths")
	fs.StringVar(&o.StateDir, "state-dir", "", "state directory (default: $XDG_STATE_HOME/signet/<repo>/<cluster>)")
	fs.StringVar(&o.EvidenceBranch, "evidence-branch", "signet/evidence", "evidence branch of the spec repository")
	fs.StringVar(&o.UIDRange, "uid-range", reconciler.DefaultLocalUIDRange, "FIRST-LAST: the transient uids checks run as when signet runs as root, one per check, none of them an account of this machine")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up waiting after this long (default: the run's derived deadline)")
	fs.BoolVarP(&o.Verbose, "verbose", "v", false, "log every lifecycle step to stderr")
	fs.BoolVar(&o.AcceptTip, "accept-current-tip", false, "when the state directory remembers no evidence tip and none is pinned, trust the branch's current tip once")
	fs.StringVar(&o.PinnedTip, "pinned-tip", "", "an evidence commit audited earlier (signet audit prints it): the branch must descend from it")
	o.out.AddFlags(fs)
}

// exitRunNotRun is the status of a run that could not be started for a
// reason of the command line or the machine (exitcodes.go has the table).
const exitRunNotRun = exitUsage

func newRunCmd() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run --request NAME --trust FILE --key FILE",
		Short: "Run one approved request now, with the local backend, and wait for its receipt",
		Long: `Run one CertificationRequest of a spec repository once, as the reconciler would:
verify its approvals against the trust policy, admit it, run its checks with the local
backend, and commit signed evidence and the receipt to the evidence branch. Then verify
the run on the evidence branch (as signet verify does) and print every check's outcome
from its verified document: reason, summary, measurements, duration and, for a non-Pass,
the last lines of its stderr.

Exit status (signet help exit-codes): 0 Pass, 10 Fail, 11 Error, 12 Inconclusive,
13 Canceled; not run: 1 invalid, 2 usage or I/O error, 3 not approved, 5 the
nodes are busy or not eligible now.`,
		Example: "  signet run --repo spec --request local-smoke-localhost --trust trust.yaml --key reconciler.key\n" +
			"  signet run --repo spec --request batch-7 --trust trust.yaml --key reconciler.key --cluster east -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func (o *runOptions) run(cmd *cobra.Command) error {
	if err := o.out.Validate(); err != nil {
		return err
	}
	var missing []string
	for name, v := range map[string]string{"--request": o.Request, "--trust": o.Trust, "--key": o.Key} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return &usageError{fmt.Errorf("required: %s", strings.Join(missing, ", "))}
	}
	if o.Branch == "" {
		b, err := currentBranch(o.Repo)
		if err != nil {
			return exitCode(exitRunNotRun, fmt.Errorf("--repo %s: %w (pass --branch)", o.Repo, err))
		}
		o.Branch = b
	}
	if o.StateDir == "" {
		o.StateDir = defaultStateDir(o.Repo, o.Cluster)
	}
	cfg := &reconciler.Config{
		TypeMeta:    specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
		Cluster:     o.Cluster,
		Spec:        reconciler.SourceConfig{URL: o.Repo, Branch: o.Branch, Path: o.Path},
		Evidence:    reconciler.EvidenceConfig{SourceConfig: reconciler.SourceConfig{URL: o.Repo, Branch: o.EvidenceBranch}, PinnedTip: o.PinnedTip},
		TrustPolicy: o.Trust, SigningKey: o.Key, PassphraseFile: o.PassphraseFile, PassphraseEnv: o.PassphraseEnv,
		StateDir: o.StateDir,
		Backends: reconciler.BackendsConfig{Local: reconciler.LocalConfig{Enabled: true, UIDRange: o.UIDRange}},
	}
	sec, err := reconciler.LoadSecrets(cfg)
	if err != nil {
		return exitCode(exitRunNotRun, err)
	}
	logw := io.Discard
	if o.Verbose {
		logw = cmd.ErrOrStderr()
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	progress := newProgress(cmd.ErrOrStderr(), o.out.JSON())
	ctx := cmd.Context()
	r, store, err := reconciler.Build(ctx, cfg, sec, log, nil, reconciler.Options{Observer: progress.event, Only: o.Request, AcceptCurrentTip: o.AcceptTip})
	if err != nil {
		return exitCode(exitRunNotRun, err)
	}
	defer store.Close()
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.Close(stopCtx)
	}()
	if err := r.Recover(ctx); err != nil {
		return exitCode(exitRunNotRun, err)
	}
	// A request runs once: say so when it already has, and print (and exit
	// with) the verdict it had.
	if done, ok := r.Finished(o.Request); ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "request %s already ran: run %s ended %s; evidence: %s (a request runs once: add a new request to run again)\n",
			o.Request, done.ID, done.Verdict, done.Dir)
	}
	if _, err := r.ReconcileOnce(ctx); err != nil {
		return exitCode(exitRunNotRun, err)
	}
	st := r.Status()
	var obj *reconciler.ObjectStatus
	for i := range st.Objects {
		if st.Objects[i].Kind == specs.KindRequest && st.Objects[i].Name == o.Request {
			obj = &st.Objects[i]
		}
	}
	if obj == nil {
		return exitCode(exitRunNotRun, fmt.Errorf("request %q is not in %s at branch %s, path %s", o.Request, o.Repo, o.Branch, o.Path))
	}
	if obj.Run == "" {
		c := obj.Conditions[0]
		return exitCode(notRunExitCode(c.Reason), fmt.Errorf("request %s was not run: %s: %s", o.Request, c.Reason, c.Message))
	}
	timeout := o.Timeout
	if timeout <= 0 {
		// The run's derived deadline already holds a reserve per check for
		// evidence and cleanup; a minute more covers a slow evidence remote.
		for _, run := range st.Runs {
			if run.ID == obj.Run {
				timeout = max(time.Until(run.Deadline), 0) + time.Minute
			}
		}
	}
	waitCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	rs, err := r.Wait(waitCtx, obj.Run)
	if err != nil {
		return exitCode(exitRunError, fmt.Errorf("run %s: %w (it stays recoverable: run the same command again)", obj.Run, err))
	}
	outs := o.outcomes(ctx, cmd.ErrOrStderr(), rs.ID)
	if o.out.JSON() {
		if err := o.out.Write(cmd.OutOrStdout(), runJSON{RunStatus: rs, Outcomes: outs}); err != nil {
			return err
		}
	} else {
		printRunSummary(cmd.OutOrStdout(), rs)
		printOutcomes(cmd.OutOrStdout(), outs)
	}
	return exitCode(runExitCode(rs.Verdict), nil)
}

// notRunExitCode is the status of a request the reconciler did not admit,
// by its Ready reason: invalid (1), not approved (3), waiting for its
// nodes (5), anything else not run (2).
func notRunExitCode(reason string) int {
	switch {
	case reason == "Invalid" || reason == "ProfileNotFound" || reason == "ExceedsCeiling" || reason == "NoParticipants" || reason == "NameCollision":
		return exitFindings
	case strings.HasSuffix(reason, "NotApproved"):
		return exitNotApproved
	case reason == "NodesBusy" || reason == "NodesIneligible":
		return exitWaiting
	}
	return exitRunNotRun
}

// runJSON is signet run's JSON: the run's status and its outcomes.
type runJSON struct {
	*reconciler.RunStatus
	Outcomes []outcome `json:"outcomes,omitempty"`
}

// outcomes verifies the finished run on the evidence branch (audit.Verify)
// and returns its outcomes from the verified documents; when it cannot,
// it says why on errw and returns none: signet run prints nothing it has
// not verified.
func (o *runOptions) outcomes(ctx context.Context, errw io.Writer, run string) []outcome {
	policy, err := signing.LoadTrustPolicy(o.Trust)
	if err != nil {
		fmt.Fprintf(errw, "outcomes not shown: %v\n", err)
		return nil
	}
	var docs *audit.RunDocuments
	rep, err := audit.Verify(ctx, audit.VerifyOptions{Repo: o.Repo, Branch: o.EvidenceBranch, Cluster: o.Cluster, Run: run, Policy: policy,
		Observe: func(d *audit.RunDocuments) { docs = d }})
	switch {
	case err != nil:
		fmt.Fprintf(errw, "outcomes not shown: verify run %s: %v\n", run, err)
		return nil
	case len(rep.Findings) > 0:
		fmt.Fprintf(errw, "outcomes not shown: signet verify %s finds %d finding(s), first: %s\n", run, len(rep.Findings), rep.Findings[0])
		return nil
	}
	return outcomesOf(docs)
}

func runExitCode(v specs.Verdict) int {
	switch v {
	case specs.VerdictPass:
		return exitOK
	case specs.VerdictFail:
		return exitRunFail
	case specs.VerdictInconclusive:
		return exitRunInconclusive
	case specs.VerdictCanceled:
		return exitRunCanceled
	}
	return exitRunError
}

func printRunSummary(w io.Writer, rs *reconciler.RunStatus) {
	fmt.Fprintf(w, "run %s: %s\n", rs.ID, rs.Verdict)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tVERDICT")
	for _, c := range rs.Checks {
		v := string(c.Verdict)
		if c.Skipped {
			v += " (skipped)"
		}
		fmt.Fprintf(tw, "%s\t%s\n", c.Name, v)
	}
	tw.Flush()
	if len(rs.Released) > 0 {
		fmt.Fprintf(w, "released: %s\n", strings.Join(rs.Released, ", "))
	}
	if len(rs.Retained) > 0 {
		fmt.Fprintf(w, "retained until an approved release: %s\n", strings.Join(rs.Retained, ", "))
	}
	fmt.Fprintf(w, "evidence: %s\n", rs.Dir)
}

// progress prints one line per check event: live on a terminal, plain
// lines otherwise; nothing in JSON mode.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	quiet bool
	tty   bool
	start map[string]time.Time
}

func newProgress(w io.Writer, quiet bool) *progress {
	p := &progress{w: w, quiet: quiet, start: map[string]time.Time{}}
	if f, ok := w.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
	return p
}

func (p *progress) event(e reconciler.Event) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	key := e.Run + "/" + e.Check
	switch {
	case e.Started:
		p.start[key] = time.Now()
		if p.tty {
			fmt.Fprintf(p.w, "[%d/%d] %s … running", e.Index+1, e.Total, e.Check)
		} else {
			fmt.Fprintf(p.w, "[%d/%d] %s: running\n", e.Index+1, e.Total, e.Check)
		}
	case e.Done:
		d := ""
		if t, ok := p.start[key]; ok {
			d = fmt.Sprintf(" (%s)", time.Since(t).Round(10*time.Millisecond))
		}
		v := string(e.Verdict)
		if e.Skipped {
			v += ", skipped"
		}
		if p.tty {
			fmt.Fprintf(p.w, "\r\033[K")
		}
		fmt.Fprintf(p.w, "[%d/%d] %s: %s%s\n", e.Index+1, e.Total, e.Check, v, d)
	}
}

func currentBranch(repo string) (string, error) {
	r, err := git.PlainOpen(repo)
	if err != nil {
		return "", err
	}
	ref, err := r.Head()
	if err != nil {
		return "", err
	}
	if !ref.Name().IsBranch() {
		return "", errors.New("HEAD is not on a branch")
	}
	return ref.Name().Short(), nil
}

func defaultStateDir(repo, cluster string) string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	abs, err := filepath.Abs(repo)
	if err != nil {
		abs = repo
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(base, "signet", hex.EncodeToString(sum[:6]), cluster)
}
