package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5"

	"signet.dev/signet/internal/gitfs"
)

// maxDriftNames bounds how many changed files a note names.
const maxDriftNames = 20

// specRevision is the committed revision of a local spec repository (what
// signet run and the reconciler read) and how its working tree differs
// from it.
type specRevision struct {
	Commit string // the commit HEAD names
	FS     fs.FS  // that commit's tree
	// Changes are the working tree's differences from it, one per file:
	// "modified p.yaml", "untracked .signet/approvals/x.yaml", …
	Changes []string
}

// openRevision reads HEAD of the Git repository in directory repo and the
// status of its working tree. A repo below the top of a work tree is that
// subtree: FS is its tree at HEAD and Changes name only its files, relative
// to it (as --repo is for every command). It returns nil, nil when repo is
// in no Git repository (a plain directory of specs has no revision to
// differ from).
func openRevision(repo string) (*specRevision, error) {
	r, err := git.PlainOpenWithOptions(repo, &git.PlainOpenOptions{DetectDotGit: true})
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("spec repository %s: %w", repo, err)
	}
	head, err := r.Head()
	if err != nil {
		return nil, fmt.Errorf("spec repository %s: HEAD: %w (commit the specs first)", repo, err)
	}
	c, err := r.CommitObject(head.Hash())
	if err != nil {
		return nil, fmt.Errorf("spec repository %s: HEAD: %w", repo, err)
	}
	sub, err := subtreeOf(r, repo)
	if err != nil {
		return nil, fmt.Errorf("spec repository %s: %w", repo, err)
	}
	tree, err := gitfs.FromCommit(c)
	if err != nil {
		return nil, fmt.Errorf("spec repository %s: HEAD: %w", repo, err)
	}
	var fsys fs.FS = tree
	if sub != "." {
		if fsys, err = fs.Sub(tree, sub); err != nil {
			return nil, fmt.Errorf("spec repository %s: HEAD: %w", repo, err)
		}
	}
	rev := &specRevision{Commit: c.Hash.String(), FS: fsys}
	wt, err := r.Worktree()
	if err != nil {
		return rev, nil // bare: nothing to differ
	}
	st, err := wt.Status()
	if err != nil {
		return nil, fmt.Errorf("spec repository %s: status: %w", repo, err)
	}
	for name, s := range st {
		if sub != "." {
			rel, ok := strings.CutPrefix(name, sub+"/")
			if !ok {
				continue
			}
			name = rel
		}
		switch {
		case s.Worktree == git.Untracked:
			rev.Changes = append(rev.Changes, "untracked "+name)
		case s.Worktree == git.Deleted || s.Staging == git.Deleted:
			rev.Changes = append(rev.Changes, "deleted "+name)
		case s.Staging == git.Added:
			rev.Changes = append(rev.Changes, "added (not committed) "+name)
		case s.Worktree != git.Unmodified || s.Staging != git.Unmodified:
			rev.Changes = append(rev.Changes, "modified "+name)
		}
	}
	sort.Slice(rev.Changes, func(i, j int) bool {
		_, a, _ := strings.Cut(rev.Changes[i], " ")
		_, b, _ := strings.Cut(rev.Changes[j], " ")
		return a < b
	})
	return rev, nil
}

// short is the commit's first 12 hex digits.
func (r *specRevision) short() string { return r.Commit[:min(12, len(r.Commit))] }

// noteDrift writes to w, when the working tree differs from the revision,
// which files differ and what reads what: reading says what this command
// read ("the working tree" or "HEAD").
func (r *specRevision) noteDrift(w io.Writer, reading string) {
	if r == nil || len(r.Changes) == 0 {
		return
	}
	names := r.Changes
	more := ""
	if len(names) > maxDriftNames {
		more = fmt.Sprintf("; and %d more", len(names)-maxDriftNames)
		names = names[:maxDriftNames]
	}
	fmt.Fprintf(w, "note: the working tree differs from HEAD (%s): %s%s\n", r.short(), strings.Join(names, "; "), more)
	fmt.Fprintf(w, "note: this command read %s; signet run and the reconciler read the committed revision: commit (and push) these files to make them count\n", reading)
}
