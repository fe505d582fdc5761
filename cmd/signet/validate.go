package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/specs"
)

func init() { addCommand(newValidateCmd) }

// render renders the spec path of the spec repository (resolve has set
// them). A missing or unreadable repository is an I/O error.
func (o *specPathOptions) render() (*specs.Rendering, error) {
	repo := o.Repo.Repo
	st, err := os.Stat(repo)
	if err != nil {
		return nil, fmt.Errorf("spec repository: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("spec repository %s is not a directory", repo)
	}
	return specs.Render(os.DirFS(repo), o.Path)
}

// validateOptions are the flags of signet validate.
type validateOptions struct {
	Spec   specPathOptions
	Trust  trustOptions
	Output outputOptions
}

// AddFlags registers the command's flags.
func (o *validateOptions) AddFlags(fs *pflag.FlagSet) {
	o.Spec.AddFlags(fs)
	o.Trust.AddFlags(fs)
	o.Output.AddFlags(fs)
}

// validateReport is what signet validate prints: with --output json, this
// struct as JSON. Checks added to validate (approvals, …) add fields here
// and findings to Findings.
type validateReport struct {
	Repo     string          `json:"repo"`
	Path     string          `json:"path"`
	Valid    bool            `json:"valid"`
	Objects  []objectDigest  `json:"objects"`
	Findings []specs.Finding `json:"findings"`
}

// objectDigest names a rendered object and the digest approvals sign.
type objectDigest struct {
	Ref    string       `json:"ref"`
	Digest specs.Digest `json:"digest"`
}

func newValidateCmd() *cobra.Command {
	o := &validateOptions{Output: outputOptions{Annotations: true}}
	cmd := &cobra.Command{
		Use:   "validate [PATH]",
		Short: "Check every spec of a spec repository and report all problems",
		Long: `Render the spec path PATH (default ".", a directory inside the repository, with
or without a kustomization.yaml) of the spec repository --repo (default ".") as the
reconciler would, parse every signet document strictly and check every rule of the
specs: unknown fields, duplicate keys, YAML aliases, spec files over 1 MiB,
names, digests, bundle pins against the bundle bytes, scripts, backends,
deadlines, workloads, and requests against their profiles. Every problem is
reported, with file:line:column, field and what is wrong (-o github: as
GitHub Actions annotations; -o sarif: as SARIF 2.1.0).

Bundle paths in profiles are relative to the repository root (--repo), and
PATH is relative to it too, as in signet diff.

With --trust (and --cluster), every object or requested action that is not
approved under the trust policy, and every unreadable approval file under
<PATH>/.signet/approvals/, is a finding too (see signet approvals for details).

It reads the files as they are in the working tree; when they differ from the
commit HEAD names (what signet run and the reconciler read), a note on stderr
names the files.

Exit status: 0 valid, 1 findings, 2 usage or I/O error.`,
		Example: "  signet validate                # the spec repository in the current directory\n" +
			"  signet validate --repo examples/spec-repo\n  signet validate --repo examples/spec-repo overlays/cluster-b -o json\n" +
			"  signet validate -o github   # in a GitHub Actions step: findings annotate the PR's lines\n" +
			"  signet validate -o sarif > signet.sarif   # for code scanning",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Output.Validate(); err != nil {
				return err
			}
			if err := o.Spec.resolve(cmd, args); err != nil {
				return err
			}
			repo := o.Spec.Repo.Repo
			report, r, err := o.validate(cmd.Context())
			if err != nil {
				return ioFailure(err)
			}
			if err := o.print(cmd.OutOrStdout(), report); err != nil {
				return ioFailure(err)
			}
			noteBundleRoot(cmd.ErrOrStderr(), repo, o.Spec.Path, r)
			// A status that cannot be read changes nothing validate says.
			if rev, err := openRevision(repo); err == nil {
				rev.noteDrift(cmd.ErrOrStderr(), "the working tree")
			}
			if !report.Valid {
				return exitCode(1, nil)
			}
			return nil
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// validate renders the spec path and returns the report and the rendering;
// the error is for a repository that cannot be read at all.
func (o *validateOptions) validate(_ context.Context) (*validateReport, *specs.Rendering, error) {
	repo := o.Spec.Repo.Repo
	r, err := o.Spec.render()
	if err != nil {
		return nil, nil, err
	}
	report := &validateReport{
		Repo:     repo,
		Path:     o.Spec.Path,
		Objects:  []objectDigest{},
		Findings: []specs.Finding{},
	}
	for _, obj := range r.Objects {
		report.Objects = append(report.Objects, objectDigest{Ref: obj.Ref(), Digest: obj.Digest})
	}
	report.Findings = append(report.Findings, r.Findings...)
	approvals, err := o.Trust.findings(r, repo, o.Spec.Path, time.Now())
	if err != nil {
		return nil, nil, err
	}
	report.Findings = append(report.Findings, approvals...)
	report.Valid = len(report.Findings) == 0
	return report, r, nil
}

// print writes the report as JSON or as one line per finding followed by a
// summary line.
func (o *validateOptions) print(w io.Writer, r *validateReport) error {
	switch {
	case o.Output.JSON():
		return o.Output.Write(w, r)
	case o.Output.Format == "github":
		return writeGitHub(w, r.Repo, "signet validate", r.Findings)
	case o.Output.Format == "sarif":
		return writeSARIF(w, r.Repo, "signet validate", r.Findings)
	}
	for _, f := range r.Findings {
		if _, err := fmt.Fprintln(w, f.String()); err != nil {
			return err
		}
	}
	profiles, requests, standings := 0, 0, 0
	for _, obj := range r.Objects {
		switch {
		case strings.HasPrefix(obj.Ref, specs.KindProfile+"/"):
			profiles++
		case strings.HasPrefix(obj.Ref, specs.KindStanding+"/"):
			standings++
		default:
			requests++
		}
	}
	counts := fmt.Sprintf("%d profiles, %d requests", profiles, requests)
	if standings > 0 {
		counts += fmt.Sprintf(", %d standing certifications", standings)
	}
	where := r.Repo
	if r.Path != "." {
		where += ", path " + r.Path
	}
	if r.Valid {
		_, err := fmt.Fprintf(w, "%s: valid (%s)\n", where, counts)
		return err
	}
	_, err := fmt.Fprintf(w, "%s: %d findings (%s rendered)\n", where, len(r.Findings), counts)
	return err
}

// ioFailure gives err exit status 2 (usage or I/O error), keeping a
// usageError as it is.
func ioFailure(err error) error {
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return exitCode(2, err)
}
