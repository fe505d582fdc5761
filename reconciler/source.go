package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/internal/gitfs"
)

// DefaultSourceTimeout bounds one Revision or Checkout of a GitSource
// whose Timeout is zero.
const DefaultSourceTimeout = 2 * time.Minute

// GitSource reads the spec repository from a Git remote into a bare mirror
// under the state directory. Trees are read from commits, never from a
// working directory.
type GitSource struct {
	// Timeout bounds each Revision and Checkout as elapsed time, however
	// the remote behaves (a remote that accepts and never answers
	// included); DefaultSourceTimeout when zero. Set it before first use.
	Timeout time.Duration

	url    string
	branch string
	auth   transport.AuthMethod
	repo   *git.Repository

	mu    sync.Mutex
	trees map[string]fs.FS
}

var _ SpecSource = (*GitSource)(nil)

// SourceAuth is the credentials of a spec remote.
type SourceAuth struct {
	Token              string
	Username, Password string
	SSHSigner          ssh.Signer
}

// OpenGitSource opens (creating if needed) the bare mirror at dir for url.
func OpenGitSource(dir, url, branch string, a SourceAuth) (*GitSource, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	repo, err := git.PlainOpen(dir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.PlainInit(dir, true)
	}
	if err != nil {
		return nil, fmt.Errorf("spec mirror %s: %w", dir, err)
	}
	// Credentials in an http(s) URL become the auth method: the URL kept
	// in the mirror's config (on disk) and quoted in errors carries none.
	remoteURL := absURL(url)
	if ep, err := transport.NewEndpoint(remoteURL); err == nil && (ep.Protocol == "http" || ep.Protocol == "https") && ep.User != "" {
		if ep.Password != "" && a.Token == "" && a.Password == "" && a.SSHSigner == nil {
			a.Username, a.Password = ep.User, ep.Password
		}
		ep.User, ep.Password = "", ""
		remoteURL = ep.String()
	}
	// The mirror follows the configured URL, also when it changed since
	// the mirror was made (and never keeps an old URL's credentials).
	rem, err := repo.Remote("origin")
	switch {
	case errors.Is(err, git.ErrRemoteNotFound):
	case err != nil:
		return nil, err
	case len(rem.Config().URLs) != 1 || rem.Config().URLs[0] != remoteURL:
		if err := repo.DeleteRemote("origin"); err != nil {
			return nil, err
		}
		err = git.ErrRemoteNotFound
	}
	if errors.Is(err, git.ErrRemoteNotFound) {
		if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{remoteURL}}); err != nil {
			return nil, err
		}
	}
	s := &GitSource{url: remoteURL, branch: branch, repo: repo, trees: map[string]fs.FS{}}
	switch {
	case a.SSHSigner != nil:
		s.auth = &gitssh.PublicKeys{User: "git", Signer: a.SSHSigner}
	case a.Token != "" && a.Username != "":
		s.auth = &githttp.BasicAuth{Username: a.Username, Password: a.Token}
	case a.Token != "":
		s.auth = &githttp.TokenAuth{Token: a.Token}
	case a.Username != "":
		s.auth = &githttp.BasicAuth{Username: a.Username, Password: a.Password}
	}
	return s, nil
}

func absURL(u string) string {
	if filepath.IsAbs(u) || (len(u) > 0 && u[0] == '.') {
		if abs, err := filepath.Abs(u); err == nil {
			return abs
		}
	}
	return u
}

func (s *GitSource) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	d := s.Timeout
	if d <= 0 {
		d = DefaultSourceTimeout
	}
	return context.WithTimeout(ctx, d)
}

// Revision asks the remote for the branch tip, as `git ls-remote` does,
// within Timeout.
func (s *GitSource) Revision(ctx context.Context) (string, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	rem, err := s.repo.Remote("origin")
	if err != nil {
		return "", err
	}
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: s.auth})
	if err != nil {
		return "", scrub(err, s.auth)
	}
	want := plumbing.NewBranchReferenceName(s.branch)
	for _, r := range refs {
		if r.Name() == want {
			return r.Hash().String(), nil
		}
	}
	return "", fmt.Errorf("branch %q not found on the spec remote", s.branch)
}

// Checkout fetches rev when it is not in the mirror, within Timeout, and
// returns its tree.
func (s *GitSource) Checkout(ctx context.Context, rev string) (fs.FS, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.trees[rev]; ok {
		return t, nil
	}
	h := plumbing.NewHash(rev)
	if _, err := s.repo.CommitObject(h); err != nil {
		err := s.repo.FetchContext(ctx, &git.FetchOptions{
			RemoteName: "origin", Auth: s.auth, Force: true,
			RefSpecs: []config.RefSpec{config.RefSpec("+refs/heads/" + s.branch + ":refs/remotes/origin/" + s.branch)},
		})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil, scrub(err, s.auth)
		}
	}
	c, err := s.repo.CommitObject(h)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", rev, err)
	}
	t, err := gitfs.FromCommit(c)
	if err != nil {
		return nil, err
	}
	if len(s.trees) > 64 {
		clear(s.trees)
	}
	s.trees[rev] = t
	return t, nil
}

// scrub removes credentials from an error's text.
func scrub(err error, a transport.AuthMethod) error {
	msg := err.Error()
	switch v := a.(type) {
	case *githttp.TokenAuth:
		msg = replaceSecret(msg, v.Token)
	case *githttp.BasicAuth:
		msg = replaceSecret(msg, v.Password)
	}
	return errors.New(redactURL(msg))
}

func replaceSecret(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "<redacted>")
}
