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

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/specs"
)

// repoUsage is the help text of --repo, the same for every command that
// reads a repository (issue 17: one flag, one default, one meaning).
const repoUsage = `the repository's root directory ("." is the current directory); run, status, audit, verify, logs and report also take a file://, http(s):// or ssh:// URL`

// repoOptions is --repo: the repository a command reads. Its root is what
// bundle paths, spec paths (PATH) and approval paths are relative to.
type repoOptions struct {
	Repo string
}

// AddFlags registers --repo with its default ".".
func (o *repoOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Repo, "repo", ".", repoUsage)
}

// local refuses a URL: the command reads a directory on this machine (a
// working tree, or for diff an object store).
func (o *repoOptions) local() error {
	if strings.Contains(o.Repo, "://") {
		return &usageError{fmt.Errorf("--repo %q: this command reads a local directory, not a URL (clone the repository and give its directory)", o.Repo)}
	}
	return nil
}

// specPathOptions name a spec path inside a spec repository: --repo and the
// positional PATH, the same for validate, render, sign, approvals and diff.
type specPathOptions struct {
	Repo repoOptions
	// Path is the spec path, cleaned and relative to the repository root
	// ("." for the root); resolve sets it.
	Path string
	// legacyPath is the deprecated --path flag, which PATH replaces.
	legacyPath string
}

// AddFlags registers --repo and the deprecated --path (hidden; resolve
// notes its use on stderr, never on stdout where a document may go).
func (o *specPathOptions) AddFlags(fs *pflag.FlagSet) {
	o.Repo.AddFlags(fs)
	fs.StringVar(&o.legacyPath, "path", "", "spec path inside the repository (deprecated: give it as PATH)")
	_ = fs.MarkHidden("path")
}

// resolve sets Path from the positional arguments (at most one PATH) or the
// deprecated --path. A URL for --repo, a PATH outside --repo and a PATH that
// is the root of another Git repository (the old `signet validate REPO`
// form) are usage errors naming the value.
func (o *specPathOptions) resolve(cmd *cobra.Command, args []string) error {
	if err := o.Repo.local(); err != nil {
		return err
	}
	p := "."
	switch {
	case len(args) > 0 && o.legacyPath != "":
		return &usageError{fmt.Errorf("PATH %q and --path %q: give the spec path once, as PATH", args[0], o.legacyPath)}
	case len(args) > 0:
		p = args[0]
	case o.legacyPath != "":
		p = o.legacyPath
		fmt.Fprintf(cmd.ErrOrStderr(), "note: --path is deprecated: give the spec path as PATH (signet %s --repo %s %s)\n", cmd.Name(), o.Repo.Repo, p)
	}
	dir, err := specPathArg(o.Repo.Repo, p, true)
	if err != nil {
		return err
	}
	o.Path = dir
	return nil
}

// specPathArg returns p as a clean slash-separated path relative to the
// root of repo: a relative p is relative to the root (as git's pathspecs
// are to the top level), an absolute one must lie under it. With worktree,
// p must not be the root of a Git repository other than repo: that is the
// old positional REPO form, and read as a spec path it would resolve the
// profiles' bundle paths from the wrong root.
func specPathArg(repo, p string, worktree bool) (string, error) {
	rel := p
	if filepath.IsAbs(p) {
		root, err := filepath.Abs(repo)
		if err == nil {
			rel, err = filepath.Rel(root, p)
		}
		if err != nil {
			return "", &usageError{fmt.Errorf("PATH %q: %w", p, err)}
		}
	}
	dir := path.Clean(filepath.ToSlash(rel))
	if !fs.ValidPath(dir) {
		return "", &usageError{fmt.Errorf("PATH %q is outside --repo %q: PATH is a spec path inside the repository (give the repository as --repo)", p, repo)}
	}
	if worktree && dir != "." {
		if _, err := os.Lstat(filepath.Join(repo, filepath.FromSlash(dir), ".git")); err == nil {
			return "", &usageError{fmt.Errorf("PATH %q is the root of another Git repository, not a spec path inside --repo %q: give it as --repo %s", p, repo, p)}
		}
	}
	return dir, nil
}

// noteBundleRoot writes to w, for a rendering of spec path dir that is not
// the root, the bundles that are missing from the repository root but
// present under dir: bundle paths are relative to the root, so dir is
// probably a spec repository of its own, given as PATH where --repo was
// meant (the old `signet validate REPO` form).
func noteBundleRoot(w io.Writer, repo, dir string, r *specs.Rendering) {
	if dir == "." || r == nil {
		return
	}
	for _, obj := range r.Objects {
		if obj.Profile == nil {
			continue
		}
		bp := obj.Profile.Spec.Bundle.Path
		if bp == "" || !fs.ValidPath(bp) {
			continue
		}
		if _, err := os.Stat(filepath.Join(repo, filepath.FromSlash(bp))); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if st, err := os.Stat(filepath.Join(repo, filepath.FromSlash(dir), filepath.FromSlash(bp))); err == nil && st.IsDir() {
			fmt.Fprintf(w, "note: bundle paths are relative to the repository root (--repo %s): %s is not there but is under %s; if %s is a spec repository of its own, give it as --repo %s\n",
				repo, bp, dir, dir, filepath.Join(repo, filepath.FromSlash(dir)))
			return
		}
	}
}
