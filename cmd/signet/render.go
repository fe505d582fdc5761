package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/specs"
)

func init() { addCommand(newRenderCmd) }

// renderOptions are the flags of signet render.
type renderOptions struct {
	Spec   specPathOptions
	Output outputOptions
}

// AddFlags registers the command's flags.
func (o *renderOptions) AddFlags(fs *pflag.FlagSet) {
	o.Spec.AddFlags(fs)
	o.Output.AddFlags(fs)
}

// renderReport is what signet render prints with --output json.
type renderReport struct {
	Repo     string           `json:"repo"`
	Path     string           `json:"path"`
	Objects  []renderedObject `json:"objects"`
	Findings []specs.Finding  `json:"findings"`
}

// renderedObject is one rendered object: where it came from, the canonical
// JSON approvals sign and its digest, and for a profile its bundle and
// derived values. Canonical is the canonical JSON value, indented for
// reading; Digest is the sha256 of its compact RFC 8785 bytes.
type renderedObject struct {
	Ref       string            `json:"ref"`
	Source    specs.Source      `json:"source"`
	Digest    specs.Digest      `json:"digest"`
	Canonical json.RawMessage   `json:"canonical"`
	Bundle    *specs.BundleInfo `json:"bundle,omitempty"`
	Derived   *derivedValues    `json:"derived,omitempty"`

	obj *specs.Object
}

// derivedValues are the values of DESIGN §2 that are derived, never written.
type derivedValues struct {
	RunDeadline specs.Seconds     `json:"runDeadline"`
	Floor       map[string]string `json:"floor"`
}

func newRenderCmd() *cobra.Command {
	o := &renderOptions{}
	cmd := &cobra.Command{
		Use:   "render [PATH]",
		Short: "Show the rendered objects of a spec repository with their digests and derived values",
		Long: `Render the spec path PATH (default ".", a directory inside the repository) of the
spec repository --repo (default ".") as the reconciler would and print every signet object: its source, the sha256 digest of its
RFC 8785 canonical JSON (what approvals sign; for a request, its execution
fields only), and for a profile its bundle, the derived run deadline (check
deadlines plus 60 s per check) and the per-node eligibility floor (the
largest request of any check, GPUs included). --output json adds the
canonical JSON itself and the bundle's files.

Findings, if any, are printed after the objects, as signet validate does.

Exit status: 0 valid, 1 findings, 2 usage or I/O error.`,
		Example: "  signet render\n  signet render --repo examples/spec-repo\n  signet render --repo examples/spec-repo overlays/cluster-b -o json",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Output.Validate(); err != nil {
				return err
			}
			if err := o.Spec.resolve(cmd, args); err != nil {
				return err
			}
			r, err := o.Spec.render()
			if err != nil {
				return ioFailure(err)
			}
			noteBundleRoot(cmd.ErrOrStderr(), o.Spec.Repo.Repo, o.Spec.Path, r)
			report := newRenderReport(o.Spec.Repo.Repo, o.Spec.Path, r)
			if o.Output.JSON() {
				err = o.Output.Write(cmd.OutOrStdout(), report)
			} else {
				err = printRenderText(cmd.OutOrStdout(), report)
			}
			if err != nil {
				return ioFailure(err)
			}
			if len(report.Findings) > 0 {
				return exitCode(1, nil)
			}
			return nil
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func newRenderReport(repo, dir string, r *specs.Rendering) *renderReport {
	report := &renderReport{Repo: repo, Path: dir, Objects: []renderedObject{}, Findings: []specs.Finding{}}
	report.Findings = append(report.Findings, r.Findings...)
	for _, obj := range r.Objects {
		ro := renderedObject{Ref: obj.Ref(), Source: obj.Source, Digest: obj.Digest, Canonical: obj.Canonical, obj: obj}
		if obj.Profile != nil {
			if b, ok := r.Bundles[obj.Name]; ok && r.Profile(obj.Name) == obj {
				ro.Bundle = &b
			}
			floor := map[string]string{}
			for name, q := range obj.Profile.Floor() {
				floor[name] = q.String()
			}
			ro.Derived = &derivedValues{
				RunDeadline: specs.Seconds(obj.Profile.RunDeadline().Seconds()),
				Floor:       floor,
			}
		}
		report.Objects = append(report.Objects, ro)
	}
	return report
}

func printRenderText(w io.Writer, report *renderReport) error {
	var b strings.Builder
	for i, o := range report.Objects {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s\n", o.Ref)
		fmt.Fprintf(&b, "  source:       %s[doc %d]\n", o.Source.File, o.Source.Index)
		fmt.Fprintf(&b, "  digest:       %s\n", o.Digest)
		if o.Bundle != nil {
			fmt.Fprintf(&b, "  bundle:       %s %s (%d files, %d bytes)\n", o.Bundle.Path, o.Bundle.Digest, len(o.Bundle.Files), o.Bundle.Size)
		}
		if o.Derived != nil {
			fmt.Fprintf(&b, "  run deadline: %s (%s)\n", o.Derived.RunDeadline, o.Derived.RunDeadline.Duration())
			names := make([]string, 0, len(o.Derived.Floor))
			for name := range o.Derived.Floor {
				names = append(names, name)
			}
			slices.Sort(names)
			parts := make([]string, 0, len(names))
			for _, name := range names {
				parts = append(parts, name+"="+o.Derived.Floor[name])
			}
			floor := strings.Join(parts, " ")
			if floor == "" {
				floor = "(none)"
			}
			fmt.Fprintf(&b, "  floor:        %s\n", floor)
		}
		if p := o.obj.Profile; p != nil {
			checks := make([]string, 0, len(p.Spec.Checks))
			for _, c := range p.Spec.Checks {
				checks = append(checks, fmt.Sprintf("%s (%s, %s)", c.Name, c.Backend, c.Deadline))
			}
			onFailure := p.Spec.OnFailure
			if onFailure == "" {
				onFailure = specs.OnFailureContinue
			}
			fmt.Fprintf(&b, "  participants: %d..%d, onFailure %s\n", p.Spec.Participants.Min, p.Spec.Participants.Max, onFailure)
			fmt.Fprintf(&b, "  checks:       %s\n", strings.Join(checks, ", "))
		}
		if q := o.obj.Request; q != nil {
			fmt.Fprintf(&b, "  profile:      %s\n", q.Spec.Profile)
			if len(q.Spec.Nodes) > 0 {
				fmt.Fprintf(&b, "  nodes:        %s\n", strings.Join(q.Spec.Nodes, ", "))
			}
			if len(q.Spec.Selector) > 0 || q.Spec.Count > 0 {
				keys := make([]string, 0, len(q.Spec.Selector))
				for k := range q.Spec.Selector {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				parts := make([]string, 0, len(keys))
				for _, k := range keys {
					parts = append(parts, k+"="+q.Spec.Selector[k])
				}
				selector := strings.Join(parts, ",")
				if selector == "" {
					selector = "(none)"
				}
				fmt.Fprintf(&b, "  selector:     %s, count %d\n", selector, q.Spec.Count)
			}
			if q.Spec.Cancel || q.Spec.Release {
				fmt.Fprintf(&b, "  actions:      cancel=%t release=%t\n", q.Spec.Cancel, q.Spec.Release)
			}
		}
	}
	if len(report.Findings) > 0 {
		fmt.Fprintf(&b, "\n%d findings:\n", len(report.Findings))
		for _, f := range report.Findings {
			fmt.Fprintf(&b, "  %s\n", f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
