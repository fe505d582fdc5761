package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

func init() { addCommand(newSignCmd) }

// signOptions are the flags of signet sign.
type signOptions struct {
	Spec       specPathOptions
	Key        string
	Passphrase passphraseOptions
	Objects    []string
	Action     string
	Clusters   []string
	Expires    string
	Output     outputOptions
}

// AddFlags registers the command's flags.
func (o *signOptions) AddFlags(fs *pflag.FlagSet) {
	o.Spec.AddFlags(fs)
	fs.StringVar(&o.Key, "key", "", "private key file (required)")
	o.Passphrase.AddFlags(fs)
	fs.StringArrayVar(&o.Objects, "object", nil, "KIND/NAME to approve (repeatable; default: every object)")
	fs.StringVar(&o.Action, "action", "", "approve an action on the requests named by --object: cancel or release")
	fs.StringSliceVar(&o.Clusters, "clusters", nil, "limit the approval to these clusters (comma-separated; default: all)")
	fs.StringVar(&o.Expires, "expires", "", "expiry: an RFC 3339 time or a duration from now (e.g. 720h)")
	o.Output.AddFlags(fs)
}

// signJSON is the --output json form of signet sign.
type signJSON struct {
	File     string            `json:"file"`
	KeyID    string            `json:"keyID"`
	Subjects []signing.Subject `json:"subjects"`
	Clusters []string          `json:"clusters,omitempty"`
	Expires  string            `json:"expires,omitempty"`
}

func newSignCmd() *cobra.Command {
	o := &signOptions{}
	cmd := &cobra.Command{
		Use:   "sign [PATH] --key FILE [--object KIND/NAME ...]",
		Short: "Approve spec objects or actions: write a signed approval",
		Long: `Render the spec path PATH (default ".", a directory inside the repository) of the
spec repository --repo (default ".") and write ONE approval under
<repo>/<PATH>/.signet/approvals/: a DSSE
envelope of an in-toto statement (predicate type https://signet.dev/approval/v1)
whose subjects are the chosen objects with the sha256 of their canonical JSON.
With --action cancel|release it approves that action on the requests named by
--object (subject CertificationRequest/NAME#ACTION, the request's digest);
--action release on a StandingCertification approves releasing the nodes
retained by each firing its spec.release lists (subjects
StandingCertification/NAME#release:RUN, the standing certification's digest).
--clusters and --expires scope the approval. Only a rendering without findings
is signed. The file name is derived from the statement and the key and an
existing file is never overwritten.

Exit status (signet help exit-codes): 0 written, 1 the specs have findings, 2 usage
or I/O error (unknown object, unreadable key, existing file).`,
		Example: `  signet sign --key alice.key --object CertificationProfile/h100-burnin
  signet sign --repo specs --key alice.key --object CertificationRequest/batch-7 --action release --clusters east
  signet sign --key alice.key --passphrase-env SIGNET_PASSPHRASE --expires 720h`,
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

func (o *signOptions) run(cmd *cobra.Command, repo string, now time.Time) error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if o.Key == "" {
		return &usageError{errors.New("required: --key")}
	}
	if o.Action != "" && o.Action != signing.ActionCancel && o.Action != signing.ActionRelease {
		return &usageError{fmt.Errorf("--action: %q is not cancel or release", o.Action)}
	}
	if o.Action != "" && len(o.Objects) == 0 {
		return &usageError{errors.New("--action needs --object CertificationRequest/NAME (or StandingCertification/NAME for release)")}
	}
	pred := signing.ApprovalPredicate{Clusters: o.Clusters, SignedAt: now.UTC().Format(time.RFC3339)}
	if o.Expires != "" {
		exp, err := parseExpiry(o.Expires, now)
		if err != nil {
			return &usageError{err}
		}
		pred.Expires = exp.UTC().Format(time.RFC3339)
	}
	pass, err := o.Passphrase.Read()
	if err != nil {
		return err
	}
	key, err := signing.LoadPrivateKey(o.Key, pass)
	if err != nil {
		return err
	}
	r, _, dir, err := renderForApprovals(repo, o.Spec.Path)
	if err != nil {
		return err
	}
	noteBundleRoot(cmd.ErrOrStderr(), repo, dir, r)
	if rev, err := openRevision(repo); err == nil {
		rev.noteDrift(cmd.ErrOrStderr(), "the working tree (an approval is of the objects as they are there)")
	}
	if !r.Valid() {
		for _, f := range r.Findings {
			fmt.Fprintln(cmd.ErrOrStderr(), f.String())
		}
		return exitCode(exitFindings, fmt.Errorf("sign: %s has %d finding(s); fix them before approving (signet validate lists them)", filepath.Join(repo, dir), len(r.Findings)))
	}
	subjects, err := o.subjects(r)
	if err != nil {
		return err
	}
	st, err := signing.NewApprovalStatement(subjects, pred)
	if err != nil {
		return err
	}
	env, err := signing.SignStatement(st, key)
	if err != nil {
		return err
	}
	name, err := signing.ApprovalFileName(st, key.Public())
	if err != nil {
		return err
	}
	outDir := filepath.Join(repo, filepath.FromSlash(dir), filepath.FromSlash(signing.ApprovalsDir))
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	file := filepath.Join(outDir, name)
	if err := createFile(file, env, 0o644); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("sign: %s already exists; refusing to overwrite it", file)
		}
		return fmt.Errorf("sign: %w", err)
	}
	if o.Output.JSON() {
		return o.Output.Write(cmd.OutOrStdout(), signJSON{File: file, KeyID: key.KeyID(), Subjects: subjects, Clusters: pred.Clusters, Expires: pred.Expires})
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "wrote %s (key %s)\n", file, key.KeyID())
	for _, s := range subjects {
		fmt.Fprintf(w, "  %s  sha256:%s\n", s.Name, s.Digest["sha256"])
	}
	return nil
}

// subjects returns the approval subjects for the chosen objects.
func (o *signOptions) subjects(r *specs.Rendering) ([]signing.Subject, error) {
	var objs []*specs.Object
	if len(o.Objects) == 0 {
		objs = r.Objects
		if len(objs) == 0 {
			return nil, errors.New("sign: the spec path has no objects to approve")
		}
	}
	for _, ref := range o.Objects {
		obj, err := findObject(r, ref)
		if err != nil {
			return nil, err
		}
		if slices.Contains(objs, obj) {
			return nil, &usageError{fmt.Errorf("--object %s: given twice", ref)}
		}
		objs = append(objs, obj)
	}
	var out []signing.Subject
	for _, obj := range objs {
		switch {
		case o.Action == signing.ActionRelease && obj.Kind == specs.KindStanding:
			// One subject per firing spec.release lists: an approval
			// releases the firings a reviewed change named, no other.
			runs := obj.Standing.Spec.Release
			if len(runs) == 0 {
				return nil, &usageError{fmt.Errorf("--object %s: --action release approves the firings its spec.release lists, and it lists none", obj.Ref())}
			}
			for _, run := range runs {
				out = append(out, signing.SubjectFor(signing.SubjectName(obj.Kind, obj.Name, specs.StandingReleaseAction(run)), obj.Digest))
			}
			continue
		case o.Action != "" && obj.Kind != specs.KindRequest:
			return nil, &usageError{fmt.Errorf("--object %s: --action applies to CertificationRequest objects (and release to StandingCertification)", obj.Ref())}
		}
		out = append(out, signing.SubjectFor(signing.SubjectName(obj.Kind, obj.Name, o.Action), obj.Digest))
	}
	return out, nil
}

// findObject resolves KIND/NAME (KIND also "profile", "request" or
// "standing").
func findObject(r *specs.Rendering, ref string) (*specs.Object, error) {
	kind, name, ok := strings.Cut(ref, "/")
	if !ok || name == "" {
		return nil, &usageError{fmt.Errorf("--object %q is not KIND/NAME", ref)}
	}
	switch strings.ToLower(kind) {
	case "profile", strings.ToLower(specs.KindProfile):
		kind = specs.KindProfile
	case "request", strings.ToLower(specs.KindRequest):
		kind = specs.KindRequest
	case "standing", strings.ToLower(specs.KindStanding):
		kind = specs.KindStanding
	default:
		return nil, &usageError{fmt.Errorf("--object %q: kind %q is not CertificationProfile, CertificationRequest or StandingCertification", ref, kind)}
	}
	for _, obj := range r.Objects {
		if obj.Kind == kind && obj.Name == name {
			return obj, nil
		}
	}
	return nil, fmt.Errorf("sign: no %s named %q in the spec path", kind, name)
}

// parseExpiry reads an RFC 3339 time or a positive duration from now.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !t.After(now) {
			return time.Time{}, fmt.Errorf("--expires: %s is not in the future", s)
		}
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--expires: %q is not an RFC 3339 time or a positive duration", s)
	}
	return now.Add(d), nil
}

// renderForApprovals renders the spec path sub of the local spec repository
// repo and returns the rendering, the repository as a file system and the
// cleaned spec path inside it.
func renderForApprovals(repo, sub string) (*specs.Rendering, fs.FS, string, error) {
	dir, err := specPathIn(repo, sub)
	if err != nil {
		return nil, nil, "", err
	}
	return renderSpecFS(os.DirFS(repo), dir)
}

// specPathIn checks that repo is a readable directory and returns the
// spec path sub cleaned, refusing one outside the repository.
func specPathIn(repo, sub string) (string, error) {
	st, err := os.Stat(repo)
	if err != nil {
		return "", fmt.Errorf("could not read spec repository: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("spec repository %s is not a directory", repo)
	}
	dir := path.Clean(filepath.ToSlash(sub))
	if !fs.ValidPath(dir) {
		return "", &usageError{fmt.Errorf("PATH %q is not a relative path inside the repository", sub)}
	}
	return dir, nil
}

// renderSpecFS renders the spec path dir of fsys.
func renderSpecFS(fsys fs.FS, dir string) (*specs.Rendering, fs.FS, string, error) {
	r, err := specs.Render(fsys, dir)
	if err != nil {
		return nil, nil, "", err
	}
	return r, fsys, dir, nil
}
