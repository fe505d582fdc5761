package audit

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"signet.dev/signet/evidence"
)

// fetchBranch fetches ref of the remote rawURL into a temporary bare
// repository, removed by the reader's close. Credentials (in the URL or
// in auth) never appear in its errors.
func fetchBranch(ctx context.Context, rawURL string, auth evidence.Auth, ref plumbing.ReferenceName) (*openedBranch, error) {
	display, secrets := redact(rawURL)
	secrets = append(secrets, auth.Secrets()...)
	scrub := func(err error) error {
		msg := err.Error()
		for _, s := range secrets {
			if s != "" {
				msg = strings.ReplaceAll(msg, s, "REDACTED")
			}
		}
		return fmt.Errorf("evidence: could not fetch %s branch %s: %s", display, ref.Short(), msg)
	}
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, fmt.Errorf("evidence: %q is not a Git URL", display)
	}
	var am transport.AuthMethod
	switch ep.Protocol {
	case "http", "https":
		switch {
		case auth.Token != "" && auth.Username != "":
			am = &githttp.BasicAuth{Username: auth.Username, Password: auth.Token}
		case auth.Token != "":
			am = &githttp.TokenAuth{Token: auth.Token}
		case auth.Password != "":
			am = &githttp.BasicAuth{Username: auth.Username, Password: auth.Password}
		case ep.Password != "":
			am = &githttp.BasicAuth{Username: ep.User, Password: ep.Password}
		}
	case "ssh":
		if auth.SSHSigner != nil {
			user := ep.User
			if user == "" {
				user = "git"
			}
			cb, err := gitssh.NewKnownHostsCallback(auth.SSHKnownHosts...)
			if err != nil {
				return nil, fmt.Errorf("evidence: SSH known hosts: %w", err)
			}
			am = &gitssh.PublicKeys{User: user, Signer: auth.SSHSigner, HostKeyCallbackHelper: gitssh.HostKeyCallbackHelper{HostKeyCallback: cb}}
		}
	}
	dir, err := os.MkdirTemp("", "signet-audit-*.git")
	if err != nil {
		return nil, fmt.Errorf("evidence: could not create a temporary repository: %w", err)
	}
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(64*cache.MiByte), filesystem.Options{KeepDescriptors: true})
	cleanup := func() { st.Close(); os.RemoveAll(dir) }
	r, err := git.Init(st, nil)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("evidence: init %s: %w", dir, err)
	}
	rem, err := r.CreateRemoteAnonymous(&config.RemoteConfig{Name: "anonymous", URLs: []string{rawURL}})
	if err != nil {
		cleanup()
		return nil, scrub(err)
	}
	err = rem.FetchContext(ctx, &git.FetchOptions{
		RefSpecs: []config.RefSpec{config.RefSpec("+" + ref.String() + ":" + ref.String())},
		Tags:     git.NoTags, Auth: am,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		cleanup()
		if errors.Is(err, git.NoMatchingRefSpecError{}) || strings.Contains(err.Error(), "couldn't find remote ref") {
			return nil, fmt.Errorf("%w: %s has no branch %s", ErrNoBranch, display, ref.Short())
		}
		return nil, scrub(err)
	}
	rf, err := r.Reference(ref, true)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("%w: %s has no branch %s", ErrNoBranch, display, ref.Short())
	}
	return &openedBranch{st: st, display: display, branch: ref.Short(), tip: rf.Hash(), repo: r, cleanup: cleanup,
		objs: sourceFor(dir, st)}, nil
}

// redact returns rawURL without its password, and the secrets to scrub.
func redact(rawURL string) (string, []string) {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return rawURL, nil
	}
	var secrets []string
	if p, ok := u.User.Password(); ok {
		secrets = append(secrets, p, url.QueryEscape(p), url.PathEscape(p))
	}
	u.User = nil
	return u.String(), secrets
}
