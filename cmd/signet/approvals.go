package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

func init() { addCommand(newApprovalsCmd) }

// approvalsOptions are the flags of signet approvals.
type approvalsOptions struct {
	Spec        specPathOptions
	Trust       string
	Cluster     string
	WorkingTree bool
	Output      outputOptions
}

// AddFlags registers the command's flags.
func (o *approvalsOptions) AddFlags(fs *pflag.FlagSet) {
	o.Spec.AddFlags(fs)
	fs.StringVar(&o.Trust, "trust", "", "trust policy file (required)")
	fs.StringVar(&o.Cluster, "cluster", "", "decide for this cluster (approvals limited to clusters count only for theirs)")
	fs.BoolVar(&o.WorkingTree, "working-tree", false, "decide the files as they are in the working tree, not the commit HEAD names (which signet run and the reconciler read)")
	o.Output.AddFlags(fs)
}

// approvalsReport is the --output json form of signet approvals.
type approvalsReport struct {
	TrustPolicy       string       `json:"trustPolicy"`
	TrustPolicyDigest specs.Digest `json:"trustPolicyDigest"`
	Cluster           string       `json:"cluster,omitempty"`
	Time              string       `json:"time"`
	// Revision is the commit decided ("" for the working tree or a
	// directory that is not a Git repository); WorkingTreeChanges are the
	// files in which the working tree differs from HEAD.
	Revision           string             `json:"revision,omitempty"`
	WorkingTreeChanges []string           `json:"workingTreeChanges,omitempty"`
	Objects            []objectApproval   `json:"objects"`
	ApprovalErrors     []string           `json:"approvalErrors,omitempty"`
	Findings           []specs.Finding    `json:"findings,omitempty"`
	Approvals          []approvalFileInfo `json:"approvals"`
}

// objectApproval is one decided subject with where its object is written.
type objectApproval struct {
	signing.Decision
	Source    specs.Source `json:"source"`
	ReliedOn  []string     `json:"reliedOn,omitempty"`
	KeyOwners []string     `json:"keyOwners,omitempty"`
}

// approvalFileInfo summarises one parsed approval file.
type approvalFileInfo struct {
	File     string   `json:"file"`
	Subjects []string `json:"subjects"`
	Clusters []string `json:"clusters,omitempty"`
	Expires  string   `json:"expires,omitempty"`
	SignedAt string   `json:"signedAt"`
}

func newApprovalsCmd() *cobra.Command {
	o := &approvalsOptions{}
	cmd := &cobra.Command{
		Use:   "approvals [PATH] --trust FILE",
		Short: "Show which spec objects are approved, by which keys, and why not",
		Long: `Render the spec path PATH (default ".", a directory inside the repository) of the
spec repository --repo (default ".") at the commit HEAD names (what signet run and the reconciler read; --working-tree for the files as
they are), read every approval under <PATH>/.signet/approvals/ and decide, under the trust policy, for
the cluster and at the current time, every object and every action a request
asks for (cancel, release): approved or not, by which keys, and why not
(changed since approval, untrusted key, bad signature, expired, other cluster,
revoked key, threshold not met).

Exit status: 0 everything approved, 3 something is not approved or an approval
file or spec is broken, 2 usage or I/O error (signet help exit-codes).
When the working tree differs from HEAD, a note on stderr names the files.`,
		Example: `  signet approvals --trust trust.yaml --cluster east
  signet approvals --repo examples/spec-repo overlays/cluster-b --trust trust.yaml -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Spec.resolve(cmd, args); err != nil {
				return err
			}
			return o.run(cmd, o.Spec.Repo.Repo, time.Now())
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func (o *approvalsOptions) run(cmd *cobra.Command, repo string, now time.Time) error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if o.Trust == "" {
		return &usageError{errors.New("required: --trust")}
	}
	policy, err := signing.LoadTrustPolicy(o.Trust)
	if err != nil {
		return err
	}
	rev, err := openRevision(repo)
	if err != nil {
		return err
	}
	var (
		r       *specs.Rendering
		fsys    fs.FS
		dir     string
		reading = "the working tree"
	)
	if rev != nil && !o.WorkingTree {
		// What signet run and the reconciler read: the commit, not
		// uncommitted edits or approval files.
		reading = "HEAD " + rev.short()
		dir, err = specPathIn(repo, o.Spec.Path)
		if err == nil {
			r, fsys, dir, err = renderSpecFS(rev.FS, dir)
		}
	} else {
		r, fsys, dir, err = renderForApprovals(repo, o.Spec.Path)
	}
	if err != nil {
		return err
	}
	rev.noteDrift(cmd.ErrOrStderr(), reading)
	noteBundleRoot(cmd.ErrOrStderr(), repo, dir, r)
	rep := decideApprovals(r, fsys, dir, policy, o.Cluster, now)
	rep.TrustPolicy = o.Trust
	if rev != nil {
		rep.WorkingTreeChanges = rev.Changes
		if !o.WorkingTree {
			rep.Revision = rev.Commit
		}
	}
	if o.Output.JSON() {
		err = o.Output.Write(cmd.OutOrStdout(), rep)
	} else {
		err = rep.writeText(cmd.OutOrStdout())
	}
	if err != nil {
		return err
	}
	if !rep.clean() {
		return exitCode(exitNotApproved, nil)
	}
	return nil
}

// decideApprovals loads the approvals of the spec path dir of fsys and
// decides every object of r and every action its requests ask for.
func decideApprovals(r *specs.Rendering, fsys fs.FS, dir string, p *signing.TrustPolicy, cluster string, now time.Time) *approvalsReport {
	approvals, errs := signing.LoadApprovals(fsys, dir)
	rep := &approvalsReport{
		TrustPolicyDigest: p.Digest(), Cluster: cluster, Time: now.UTC().Format(time.RFC3339),
		Findings: r.Findings, Objects: []objectApproval{}, Approvals: []approvalFileInfo{},
	}
	for _, e := range errs {
		rep.ApprovalErrors = append(rep.ApprovalErrors, e.Error())
	}
	for _, a := range approvals {
		rep.Approvals = append(rep.Approvals, approvalFileInfo{File: a.Path, Subjects: a.Subjects(), Clusters: a.Clusters, Expires: a.Predicate.Expires, SignedAt: a.Predicate.SignedAt})
	}
	// DecideRendering returns each object's decision followed by those of
	// the actions it asks for.
	decisions := p.DecideRendering(r, approvals, cluster, now)
	for _, obj := range r.Objects {
		n := 1 + len(signing.RequestedActions(obj))
		for _, d := range decisions[:n] {
			oa := objectApproval{Decision: d, Source: obj.Source}
			for _, a := range d.Relied {
				oa.ReliedOn = append(oa.ReliedOn, a.Path)
			}
			for _, id := range d.Keys {
				if owner := p.Owner(id); owner != "" {
					oa.KeyOwners = append(oa.KeyOwners, owner)
				}
			}
			rep.Objects = append(rep.Objects, oa)
		}
		decisions = decisions[n:]
	}
	return rep
}

func (rep *approvalsReport) clean() bool {
	if len(rep.ApprovalErrors) > 0 || len(rep.Findings) > 0 {
		return false
	}
	for _, o := range rep.Objects {
		if !o.Approved {
			return false
		}
	}
	return true
}

func (rep *approvalsReport) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tAPPROVED\tKEYS\tBY")
	for _, o := range rep.Objects {
		yes := "no"
		if o.Approved {
			yes = "yes"
		}
		by := make([]string, 0, len(o.Keys))
		for _, id := range o.Keys {
			by = append(by, id[:12])
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\n", o.Subject, yes, len(o.Keys), o.Threshold, strings.Join(by, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, o := range rep.Objects {
		if o.Approved || len(o.Reasons) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%s) is not approved:\n", o.Subject, o.Source.File)
		for _, r := range o.Reasons {
			fmt.Fprintf(w, "  - %s\n", r)
		}
	}
	if len(rep.ApprovalErrors) > 0 {
		fmt.Fprintln(w, "\nunreadable approvals (they count for nothing):")
		for _, e := range rep.ApprovalErrors {
			fmt.Fprintf(w, "  - %s\n", e)
		}
	}
	if len(rep.Findings) > 0 {
		fmt.Fprintln(w, "\nspec findings:")
		for _, f := range rep.Findings {
			fmt.Fprintf(w, "  - %s\n", f)
		}
	}
	_, err := fmt.Fprintf(w, "\ntrust policy %s, cluster %q, at %s\n", rep.TrustPolicyDigest, rep.Cluster, rep.Time)
	return err
}

// approvalFindings returns, as findings, every approval file that cannot be
// read and every object or requested action of r not approved under p for
// cluster at now. signet validate --trust calls it.
func approvalFindings(r *specs.Rendering, fsys fs.FS, dir string, p *signing.TrustPolicy, cluster string, now time.Time) []specs.Finding {
	rep := decideApprovals(r, fsys, dir, p, cluster, now)
	var out []specs.Finding
	for _, e := range rep.ApprovalErrors {
		out = append(out, specs.Finding{File: signing.ApprovalsDir, Document: -1, Message: e})
	}
	for _, o := range rep.Objects {
		if o.Approved {
			continue
		}
		out = append(out, specs.Finding{File: o.Source.File, Document: o.Source.Index,
			Message: fmt.Sprintf("%s is not approved: %s", o.Subject, strings.Join(o.Reasons, "; "))})
	}
	return out
}

// trustOptions are the --trust and --cluster flags signet validate uses to
// add approval findings.
type trustOptions struct {
	Trust   string
	Cluster string
}

// AddFlags registers --trust and --cluster.
func (o *trustOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Trust, "trust", "", "trust policy: also report every object or requested action that is not approved")
	fs.StringVar(&o.Cluster, "cluster", "", "with --trust: decide approvals for this cluster")
}

// findings returns approvalFindings for the spec path sub of the local
// repository repo, or none without --trust. The error is for a trust
// policy that cannot be read or parsed.
func (o *trustOptions) findings(r *specs.Rendering, repo, sub string, now time.Time) ([]specs.Finding, error) {
	if o.Trust == "" {
		if o.Cluster != "" {
			return nil, &usageError{errors.New("--cluster needs --trust")}
		}
		return nil, nil
	}
	p, err := signing.LoadTrustPolicy(o.Trust)
	if err != nil {
		return nil, err
	}
	return approvalFindings(r, os.DirFS(repo), path.Clean(filepath.ToSlash(sub)), p, o.Cluster, now), nil
}
