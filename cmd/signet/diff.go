package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/internal/gitfs"
	"signet.dev/signet/internal/specdiff"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

func init() { addCommand(newDiffCmd) }

// Exit codes of signet diff.
const (
	exitDiffClean         = exitOK          // nothing changed that needs approval
	exitDiffFindings      = exitFindings    // HEAD's specs have findings
	exitDiffError         = exitUsage       // usage, unreadable repository or revision
	exitDiffNeedsApproval = exitNotApproved // a change needs approval
	exitDiffUnsigned      = exitUnsigned    // --require-signed-commit and HEAD's signature is not trusted
)

// diffOptions are the flags of signet diff.
type diffOptions struct {
	Repo          repoOptions
	Trust         string
	Cluster       string
	RequireSigned bool
	Output        outputOptions
}

// AddFlags registers the command's flags.
func (o *diffOptions) AddFlags(fs *pflag.FlagSet) {
	o.Repo.AddFlags(fs)
	fs.StringVar(&o.Trust, "trust", "", "trust policy: also decide which changes are already approved at HEAD")
	fs.StringVar(&o.Cluster, "cluster", "", "cluster to decide approvals for (with --trust)")
	fs.BoolVar(&o.RequireSigned, "require-signed-commit", false, "with --trust: HEAD must carry an SSH signature by a commitSigner of the policy")
	o.Output.AddFlags(fs)
}

// diffReport is the --output json form of signet diff.
type diffReport struct {
	Base        string                  `json:"base"`
	Head        string                  `json:"head"`
	Path        string                  `json:"path"`
	Changes     []specdiff.ObjectChange `json:"changes"`
	Invalidated []invalidatedApproval   `json:"invalidatedApprovals"`
	// NeedsApproval are the subjects (objects and actions) that HEAD adds
	// or changes and that are not approved (without --trust: all of them).
	NeedsApproval []string `json:"needsApproval"`
	// Approved are the changed subjects already approved at HEAD (--trust).
	Approved []signing.Decision `json:"approved,omitempty"`
	// WouldStart are the requests HEAD adds: each is one run once approved
	// (with --trust, only those approved now).
	WouldStart []string `json:"wouldStart"`
	// Frozen are changed requests: their execution fields are frozen once
	// admitted, so the reconciler refuses the edit if a run exists.
	Frozen            []string        `json:"frozenEdits,omitempty"`
	Findings          []specs.Finding `json:"findings,omitempty"`
	TrustPolicyDigest specs.Digest    `json:"trustPolicyDigest,omitempty"`
	CommitSigner      string          `json:"commitSigner,omitempty"`
	CommitError       string          `json:"commitSignatureError,omitempty"`
	ExitCode          int             `json:"exitCode"`
}

// invalidatedApproval is an approval that was valid for BASE's object and
// no longer matches it at HEAD.
type invalidatedApproval struct {
	File     string       `json:"file"`
	Subject  string       `json:"subject"`
	Approved specs.Digest `json:"approvedDigest"`
	Head     specs.Digest `json:"headDigest,omitempty"`
	Reason   string       `json:"reason"`
}

func newDiffCmd() *cobra.Command {
	o := &diffOptions{Output: outputOptions{Annotations: true}}
	cmd := &cobra.Command{
		Use:   "diff BASE HEAD [PATH]",
		Short: "Show what a spec change does: changed objects, invalidated approvals, runs it would start",
		Long: `Render the spec path PATH (default ".", a directory inside the repository) of the
spec repository --repo (default ".") at two revisions, read from the Git object
store, never from the work tree (a --repo below the top of a work tree is that
subtree at each revision), and report:
objects added, removed and changed with a field-level diff (checks added,
removed or reordered, deadlines, GPU counts, bundle digest and which scripts
changed, nodes, …); approvals valid for BASE that the change invalidates;
the subjects that need approval (with --trust: those not yet approved at
HEAD for --cluster); and the requests that would start a run.

Exit status, for CI:
  0  nothing changed that needs approval
  1  HEAD's specs have findings (signet validate says which)
  2  usage error, unreadable repository or unknown revision
  3  changes need approval
  4  --require-signed-commit: HEAD is not signed by a trusted commit signer`,
		Example: `  signet diff origin/main HEAD --trust trust.yaml --cluster east
  signet diff main feature overlays/cluster-b -o json
  signet diff origin/main HEAD --repo examples/spec-repo -o yaml`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "."
			if len(args) == 3 {
				p = args[2]
			}
			return o.run(cmd, args[0], args[1], p, time.Now())
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func (o *diffOptions) run(cmd *cobra.Command, base, head, specPath string, now time.Time) error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if (o.RequireSigned || o.Cluster != "") && o.Trust == "" {
		return &usageError{errors.New("--require-signed-commit and --cluster need --trust")}
	}
	if err := o.Repo.local(); err != nil {
		return err
	}
	dir, err := specPathArg(o.Repo.Repo, specPath, false)
	if err != nil {
		return err
	}
	var policy *signing.TrustPolicy
	if o.Trust != "" {
		p, err := signing.LoadTrustPolicy(o.Trust)
		if err != nil {
			return exitCode(exitDiffError, err)
		}
		policy = p
	}
	repo, err := git.PlainOpenWithOptions(o.Repo.Repo, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return exitCode(exitDiffError, fmt.Errorf("--repo %s: %w", o.Repo.Repo, err))
	}
	sub, err := subtreeOf(repo, o.Repo.Repo)
	if err != nil {
		return exitCode(exitDiffError, fmt.Errorf("--repo %s: %w", o.Repo.Repo, err))
	}
	baseC, err := resolveCommit(repo, base)
	if err != nil {
		return exitCode(exitDiffError, err)
	}
	headC, err := resolveCommit(repo, head)
	if err != nil {
		return exitCode(exitDiffError, err)
	}
	baseR, baseFS, err := renderCommit(baseC, sub, dir)
	if err != nil {
		return exitCode(exitDiffError, fmt.Errorf("BASE %s: %w", base, err))
	}
	headR, headFS, err := renderCommit(headC, sub, dir)
	if err != nil {
		return exitCode(exitDiffError, fmt.Errorf("HEAD %s: %w", head, err))
	}
	rep := buildDiffReport(baseR, headR, baseFS, headFS, dir, policy, o.Cluster, now)
	rep.Base, rep.Head = baseC.Hash.String(), headC.Hash.String()
	if o.RequireSigned {
		raw, err := rawCommit(repo, headC.Hash)
		if err != nil {
			return exitCode(exitDiffError, err)
		}
		id, err := signing.VerifyCommit(raw, policy.Signers(signing.RoleCommitSigner), now)
		if err != nil {
			rep.CommitError = err.Error()
		}
		rep.CommitSigner = id
	}
	rep.ExitCode = rep.exitCode()
	switch {
	case o.Output.JSON():
		err = o.Output.Write(cmd.OutOrStdout(), rep)
	case o.Output.Format == "github":
		err = writeGitHub(cmd.OutOrStdout(), o.Repo.Repo, "signet diff", rep.Findings)
	case o.Output.Format == "sarif":
		err = writeSARIF(cmd.OutOrStdout(), o.Repo.Repo, "signet diff", rep.Findings)
	default:
		err = rep.writeText(cmd.OutOrStdout())
	}
	if err != nil {
		return exitCode(exitDiffError, err)
	}
	if rep.ExitCode != 0 {
		return exitCode(rep.ExitCode, nil)
	}
	return nil
}

func resolveCommit(repo *git.Repository, rev string) (*object.Commit, error) {
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("revision %q: %w", rev, err)
	}
	c, err := repo.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("revision %q: %w", rev, err)
	}
	return c, nil
}

// subtreeOf is the directory dir names inside the work tree of repo (opened
// from dir upwards): "." for its top and for a bare repository.
func subtreeOf(repo *git.Repository, dir string) (string, error) {
	wt, err := repo.Worktree()
	if errors.Is(err, git.ErrIsBareRepository) {
		return ".", nil
	}
	if err != nil {
		return "", err
	}
	top, err := filepath.EvalSymlinks(wt.Filesystem.Root())
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(top, abs)
	if err != nil {
		return "", err
	}
	sub := path.Clean(filepath.ToSlash(rel))
	if !fs.ValidPath(sub) {
		return "", fmt.Errorf("not inside the work tree %s", top)
	}
	return sub, nil
}

// renderCommit renders the spec path dir of the spec repository at sub
// (the repository root: ".", or a subtree) of c's tree. A path missing at
// that commit renders as no objects (everything added or removed).
func renderCommit(c *object.Commit, sub, dir string) (*specs.Rendering, fs.FS, error) {
	tree, err := gitfs.FromCommit(c)
	if err != nil {
		return nil, nil, err
	}
	var fsys fs.FS = tree
	if sub != "." {
		if fsys, err = fs.Sub(tree, sub); err != nil {
			return nil, nil, err
		}
	}
	if _, err := fs.Stat(fsys, dir); errors.Is(err, fs.ErrNotExist) {
		return &specs.Rendering{Bundles: map[string]specs.BundleInfo{}}, fsys, nil
	}
	r, err := specs.Render(fsys, dir)
	if err != nil {
		return nil, nil, err
	}
	return r, fsys, nil
}

// rawCommit returns the commit object's bytes as git stores them.
func rawCommit(repo *git.Repository, h plumbing.Hash) ([]byte, error) {
	obj, err := repo.Storer.EncodedObject(plumbing.CommitObject, h)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", h, err)
	}
	rd, err := obj.Reader()
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", h, err)
	}
	defer rd.Close()
	b, err := io.ReadAll(io.LimitReader(rd, signing.MaxCommitSize+1))
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", h, err)
	}
	return b, nil
}

// buildDiffReport compares the renderings and, with a policy, decides the
// changed subjects against HEAD's approvals.
func buildDiffReport(baseR, headR *specs.Rendering, baseFS, headFS fs.FS, dir string, policy *signing.TrustPolicy, cluster string, now time.Time) *diffReport {
	rep := &diffReport{
		Path: dir, Changes: specdiff.Diff(baseR, headR), Findings: headR.Findings,
		Invalidated: []invalidatedApproval{}, NeedsApproval: []string{}, WouldStart: []string{},
	}
	if rep.Changes == nil {
		rep.Changes = []specdiff.ObjectChange{}
	}
	baseApprovals, _ := signing.LoadApprovals(baseFS, dir)
	headApprovals, _ := signing.LoadApprovals(headFS, dir)

	// Approvals that matched BASE's object and do not match HEAD's.
	baseObj, headObj := map[string]*specs.Object{}, map[string]*specs.Object{}
	for _, o := range baseR.Objects {
		baseObj[o.Ref()] = o
	}
	for _, o := range headR.Objects {
		headObj[o.Ref()] = o
	}
	seen := map[string]bool{}
	for _, a := range append(baseApprovals, headApprovals...) {
		if seen[a.Path+"\x00"+string(a.Raw)] {
			continue
		}
		seen[a.Path+"\x00"+string(a.Raw)] = true
		for _, s := range a.Subjects() {
			kind, name, _, err := signing.ParseSubjectName(s)
			if err != nil {
				continue
			}
			ref := kind + "/" + name
			ad, _ := a.SubjectDigest(s)
			b, h := baseObj[ref], headObj[ref]
			if b == nil || b.Digest != ad {
				continue
			}
			switch {
			case h == nil:
				rep.Invalidated = append(rep.Invalidated, invalidatedApproval{File: a.Path, Subject: s, Approved: ad, Reason: "object removed"})
			case h.Digest != ad:
				rep.Invalidated = append(rep.Invalidated, invalidatedApproval{File: a.Path, Subject: s, Approved: ad, Head: h.Digest, Reason: "changed since approval"})
			}
		}
	}

	// Subjects HEAD adds or changes.
	var subjects []string
	digests := map[string]specs.Digest{}
	for _, c := range rep.Changes {
		if c.Change == specdiff.Removed {
			continue
		}
		if c.BaseDigest != c.HeadDigest {
			subjects = append(subjects, c.Ref)
			digests[c.Ref] = c.HeadDigest
		}
		for _, act := range c.Actions {
			s := signing.SubjectName(c.Kind, c.Name, act)
			subjects = append(subjects, s)
			digests[s] = c.HeadDigest
		}
		if c.Kind == specs.KindRequest && c.Change == specdiff.Changed && c.BaseDigest != c.HeadDigest {
			rep.Frozen = append(rep.Frozen, c.Ref)
		}
	}
	approved := map[string]bool{}
	if policy != nil {
		rep.TrustPolicyDigest = policy.Digest()
		for _, s := range subjects {
			d := policy.Decide(s, digests[s], headApprovals, cluster, now)
			if d.Approved {
				approved[s] = true
				rep.Approved = append(rep.Approved, d)
			} else {
				rep.NeedsApproval = append(rep.NeedsApproval, s)
			}
		}
	} else {
		rep.NeedsApproval = append(rep.NeedsApproval, subjects...)
	}
	for _, c := range rep.Changes {
		if c.Kind == specs.KindRequest && c.Change == specdiff.Added && (policy == nil || approved[c.Ref]) {
			rep.WouldStart = append(rep.WouldStart, c.Ref)
		}
	}
	return rep
}

func (rep *diffReport) exitCode() int {
	switch {
	case rep.CommitError != "":
		return exitDiffUnsigned
	case len(rep.Findings) > 0:
		return exitDiffFindings
	case len(rep.NeedsApproval) > 0:
		return exitDiffNeedsApproval
	}
	return exitDiffClean
}

func (rep *diffReport) writeText(w io.Writer) error {
	fmt.Fprintf(w, "spec path %s: %s..%s\n", rep.Path, short12(rep.Base), short12(rep.Head))
	if len(rep.Changes) == 0 {
		fmt.Fprintln(w, "no object changed")
	}
	for _, c := range rep.Changes {
		fmt.Fprintf(w, "\n%s %s\n", c.Change, c.Ref)
		if c.Change == specdiff.Changed && c.BaseDigest != c.HeadDigest {
			fmt.Fprintf(w, "  digest %s -> %s\n", c.BaseDigest, c.HeadDigest)
		}
		for _, f := range c.Fields {
			line := "  " + f.Field + ":"
			if f.Note != "" {
				line += " " + f.Note
			}
			switch {
			case f.Old != "" && f.New != "":
				line += fmt.Sprintf(" %s -> %s", f.Old, f.New)
			case f.Old != "":
				line += " " + f.Old
			case f.New != "":
				line += " " + f.New
			}
			fmt.Fprintln(w, line)
		}
		for _, a := range c.Actions {
			fmt.Fprintf(w, "  asks to %s (needs its own approval)\n", a)
		}
	}
	if len(rep.Invalidated) > 0 {
		fmt.Fprintln(w, "\napprovals this change invalidates:")
		for _, a := range rep.Invalidated {
			fmt.Fprintf(w, "  %s: %s (%s)\n", a.File, a.Subject, a.Reason)
		}
	}
	if len(rep.Frozen) > 0 {
		fmt.Fprintln(w, "\nchanged requests (execution fields are frozen once admitted; the edit is refused if the run exists):")
		for _, r := range rep.Frozen {
			fmt.Fprintf(w, "  %s\n", r)
		}
	}
	if len(rep.Approved) > 0 {
		fmt.Fprintln(w, "\nalready approved at HEAD:")
		for _, d := range rep.Approved {
			fmt.Fprintf(w, "  %s (%d/%d keys)\n", d.Subject, len(d.Keys), d.Threshold)
		}
	}
	if len(rep.NeedsApproval) > 0 {
		fmt.Fprintln(w, "\nneeds approval (signet sign):")
		for _, s := range rep.NeedsApproval {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	if len(rep.WouldStart) > 0 {
		fmt.Fprintln(w, "\nwould start a run once merged:")
		for _, s := range rep.WouldStart {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	if len(rep.Findings) > 0 {
		fmt.Fprintln(w, "\nfindings at HEAD:")
		for _, f := range rep.Findings {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	if rep.CommitSigner != "" {
		fmt.Fprintf(w, "\nHEAD signed by trusted key %s\n", rep.CommitSigner)
	}
	if rep.CommitError != "" {
		fmt.Fprintf(w, "\nHEAD commit signature: %s\n", rep.CommitError)
	}
	_, err := fmt.Fprintf(w, "\nexit %d\n", rep.ExitCode)
	return err
}

func short12(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return strings.TrimSpace(h)
}
