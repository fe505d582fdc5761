package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/gitobj"
)

// ErrNoBranch means the repository has no such evidence branch.
var ErrNoBranch = errors.New("evidence: no such branch")

// openedBranch is an evidence branch opened by openBranch: a local
// repository, or a remote fetched into a temporary one.
type openedBranch struct {
	st      storer.EncodedObjectStorer
	display string
	branch  string
	tip     plumbing.Hash
	repo    *git.Repository
	// objs reads the objects the audit walks: gitobj.Dir where the
	// objects directory is plain, go-git's storer otherwise.
	objs    gitobj.Source
	cleanup func()
}

var _ BranchReader = (*openedBranch)(nil)

func (b *openedBranch) Tip() plumbing.Hash { return b.tip }

func (b *openedBranch) Object(t plumbing.ObjectType, h plumbing.Hash, limit int64) ([]byte, error) {
	return b.objs.Object(t, h, limit)
}

func (b *openedBranch) Concurrent() bool { return b.objs.Concurrent() }

func (b *openedBranch) Resolve(rev string) (plumbing.Hash, bool) {
	h, err := b.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return plumbing.ZeroHash, false
	}
	return *h, true
}

func (b *openedBranch) Has(h plumbing.Hash) bool { return b.st.HasEncodedObject(h) == nil }

// close releases the object reader and removes a fetched repository.
func (b *openedBranch) close() {
	if d, ok := b.objs.(*gitobj.Dir); ok {
		d.Close()
	}
	if b.cleanup != nil {
		b.cleanup()
	}
}

// sourceFor returns the fastest reader of gitDir's objects: gitobj.Dir,
// or st when the objects directory is not one gitobj.Dir reads.
func sourceFor(gitDir string, st storer.EncodedObjectStorer) gitobj.Source {
	if gitDir != "" {
		if d, err := gitobj.OpenDir(gitDir); err == nil {
			return d
		}
	}
	return gitobj.StorerSource{Storer: st}
}

// isRemoteURL reports whether repo names a remote rather than a local
// directory.
func isRemoteURL(repo string) bool {
	if strings.Contains(repo, "://") {
		return true
	}
	if _, err := os.Stat(repo); err == nil {
		return false
	}
	// scp-like user@host:path
	i := strings.Index(repo, ":")
	return i > 0 && !strings.ContainsAny(repo[:i], "/\\")
}

// openBranch opens repo and resolves branch. A remote is fetched into a
// temporary bare repository removed by close.
func openBranch(ctx context.Context, repo string, auth evidence.Auth, branch string) (*openedBranch, error) {
	ref := plumbing.NewBranchReferenceName(branch)
	if err := ref.Validate(); err != nil {
		return nil, fmt.Errorf("evidence: branch %q is not a valid branch name", branch)
	}
	if repo == "" {
		return nil, errors.New("evidence: no repository given")
	}
	if isRemoteURL(repo) {
		return fetchBranch(ctx, repo, auth, ref)
	}
	r, closeStorage, err := openLocal(repo)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not open repository %s: %w", repo, err)
	}
	var tip plumbing.Hash
	for _, name := range []plumbing.ReferenceName{ref, plumbing.NewRemoteReferenceName("origin", branch)} {
		rf, err := r.Reference(name, true)
		if err == nil {
			tip = rf.Hash()
			break
		}
		if !errors.Is(err, plumbing.ErrReferenceNotFound) {
			return nil, fmt.Errorf("evidence: %s: read %s: %w", repo, name, err)
		}
	}
	if tip.IsZero() {
		return nil, fmt.Errorf("%w: %s has no branch %s", ErrNoBranch, repo, branch)
	}
	return &openedBranch{st: r.Storer, display: repo, branch: branch, tip: tip, repo: r, cleanup: closeStorage,
		objs: sourceFor(localGitDir(repo), r.Storer)}, nil
}

// openLocal opens a local repository for reading only. A plain bare or
// non-bare layout is opened with pack file descriptors kept open and the
// object list cached (nothing writes through this handle), which makes
// reading every object of a branch several times faster than go-git's
// defaults; anything else (a linked worktree) goes through PlainOpen.
func openLocal(repo string) (*git.Repository, func(), error) {
	if gitDir := localGitDir(repo); gitDir != "" {
		st, closeFn, err := openStorage(gitDir)
		if err != nil {
			return nil, nil, err
		}
		r, err := git.Open(st, nil)
		if err != nil {
			closeFn()
			return nil, nil, err
		}
		return r, closeFn, nil
	}
	r, err := git.PlainOpenWithOptions(repo, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	return r, nil, err
}

// localGitDir returns the object directory's parent of a plain bare or
// non-bare repository, "" for anything else.
func localGitDir(repo string) string {
	gitDir := repo
	if fi, err := os.Stat(filepath.Join(repo, ".git")); err == nil && fi.IsDir() {
		gitDir = filepath.Join(repo, ".git")
	}
	if fi, err := os.Stat(filepath.Join(gitDir, "objects")); err == nil && fi.IsDir() {
		return gitDir
	}
	return ""
}

// openStorage opens gitDir's objects for reading only.
func openStorage(gitDir string) (*filesystem.Storage, func(), error) {
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir, osfs.WithBoundOS()), cache.NewObjectLRU(64*cache.MiByte),
		filesystem.Options{ExclusiveAccess: true, KeepDescriptors: true})
	return st, func() { st.Close() }, nil
}
