package gitobj

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// Auth holds the credentials for a Git remote. Its String, GoString
// and LogValue never show a secret, so an Auth may be logged or printed.
type Auth struct {
	// Token is an HTTP(S) access token: sent as "Authorization: Bearer
	// <Token>", or as the password of basic auth when Username is set
	// (the form GitHub and GitLab accept, e.g. user "x-access-token").
	Token string
	// Username and Password are HTTP(S) basic auth. Username is also the
	// SSH user when the URL names none.
	Username, Password string
	// SSHSigner is the SSH client key. When nil on an SSH remote, go-git's
	// default (the SSH agent) is used.
	SSHSigner ssh.Signer
	// SSHKnownHosts lists known_hosts files that pin the server's host key;
	// empty means go-git's default ($SSH_KNOWN_HOSTS, ~/.ssh/known_hosts).
	// Host keys are always checked.
	SSHKnownHosts []string
}

// String describes which credentials are set, never their values.
func (a Auth) String() string {
	var parts []string
	if a.Token != "" {
		parts = append(parts, "token:set")
	}
	if a.Username != "" {
		parts = append(parts, "user:"+a.Username)
	}
	if a.Password != "" {
		parts = append(parts, "password:set")
	}
	if a.SSHSigner != nil {
		parts = append(parts, "ssh-key:"+ssh.FingerprintSHA256(a.SSHSigner.PublicKey()))
	}
	return "gitobj.Auth{" + strings.Join(parts, " ") + "}"
}

// GoString is String, so %#v redacts too.
func (a Auth) GoString() string { return a.String() }

// LogValue is String, so slog redacts too.
func (a Auth) LogValue() slog.Value { return slog.StringValue(a.String()) }

// Secrets lists the values to scrub from any message: the token and the
// password, as given and URL-escaped.
func (a Auth) Secrets() []string {
	var s []string
	for _, v := range []string{a.Token, a.Password} {
		if v != "" {
			s = append(s, v, url.QueryEscape(v), url.PathEscape(v))
		}
	}
	return s
}

// Remote is a Git remote reached only through the smart protocol
// (upload-pack to fetch, receive-pack to push). Its errors never hold
// credentials.
type Remote struct {
	ep      *transport.Endpoint
	client  transport.Transport
	auth    transport.AuthMethod
	display string   // the URL without credentials, for messages
	secrets []string // scrubbed from every message
}

// NewRemote checks rawURL (a local path, file://, http(s)://, ssh:// or
// scp-like user@host:path) and prepares the credentials for its protocol;
// it does not connect. Credentials in an http(s) URL are used as basic
// auth, unless a carries some, and are never shown.
func NewRemote(rawURL string, a Auth) (*Remote, error) {
	if rawURL == "" {
		return nil, errors.New("URL is empty")
	}
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		// The parse error may quote the URL, credentials included.
		return nil, fmt.Errorf("URL %q is not a Git URL", scrubURL(rawURL))
	}
	r := &Remote{ep: ep}
	switch ep.Protocol {
	case "http", "https":
		// Credentials in the URL move into the auth method so that the
		// endpoint, which go-git quotes in its errors, carries none.
		if ep.Password != "" && a.Token == "" && a.Password == "" {
			a.Username, a.Password = ep.User, ep.Password
		}
		if ep.Password != "" {
			r.secrets = append(r.secrets, ep.Password, url.QueryEscape(ep.Password), url.PathEscape(ep.Password))
		}
		ep.User, ep.Password = "", ""
		switch {
		case a.Token != "" && a.Username != "":
			r.auth = &githttp.BasicAuth{Username: a.Username, Password: a.Token}
		case a.Token != "":
			r.auth = &githttp.TokenAuth{Token: a.Token}
		case a.Password != "" || a.Username != "":
			r.auth = &githttp.BasicAuth{Username: a.Username, Password: a.Password}
		}
	case "ssh":
		if ep.Password != "" {
			r.secrets = append(r.secrets, ep.Password)
			ep.Password = ""
		}
		if ep.User == "" {
			ep.User = a.Username
		}
		if ep.User == "" {
			ep.User = "git"
		}
		if a.SSHSigner != nil {
			cb, err := gitssh.NewKnownHostsCallback(a.SSHKnownHosts...)
			if err != nil {
				return nil, fmt.Errorf("SSH known hosts %v: %w", a.SSHKnownHosts, err)
			}
			r.auth = &gitssh.PublicKeys{User: ep.User, Signer: a.SSHSigner,
				HostKeyCallbackHelper: gitssh.HostKeyCallbackHelper{HostKeyCallback: cb}}
		}
	case "file":
		if !filepath.IsAbs(ep.Path) {
			abs, err := filepath.Abs(ep.Path)
			if err != nil {
				return nil, fmt.Errorf("URL %q: %w", scrubURL(rawURL), err)
			}
			ep.Path = abs
		}
	default:
		return nil, fmt.Errorf("URL: protocol %q is not supported (local path, file, http, https, ssh)", ep.Protocol)
	}
	r.secrets = append(r.secrets, a.Secrets()...)
	r.display = ep.String()
	c, err := client.NewClient(ep)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %w", r.display, err)
	}
	r.client = c
	return r, nil
}

// scrubURL removes the userinfo of an URL-looking string.
func scrubURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		if i, j := strings.Index(s, "://"), strings.LastIndex(s, "@"); i >= 0 && j > i {
			return s[:i+3] + "REDACTED@" + s[j+1:]
		}
		return s
	}
	u.User = url.User("REDACTED")
	return u.String()
}

// URL is the remote's URL without credentials.
func (r *Remote) URL() string { return r.display }

func (r *Remote) scrub(msg string) string {
	for _, s := range r.secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "REDACTED")
		}
	}
	return msg
}

var (
	// ErrUnreachable means the remote could not be reached or failed while
	// talking; retry later.
	ErrUnreachable = errors.New("could not reach the remote")
	// ErrAuth means the remote refused the credentials; a person must act.
	ErrAuth = errors.New("the remote refused the credentials")
	// ErrRejected means the remote refused an update for a reason other
	// than a lost race (a hook, a permission, a corrupt pack).
	ErrRejected = errors.New("the remote rejected the update")
)

// RemoteError is a failure to talk to the remote: it could not be reached,
// refused the credentials, or refused the update for a reason other than a
// lost race. Its message never holds credentials; it unwraps to ErrUnreachable,
// ErrAuth or ErrRejected, and to the context's error when that ended it.
type RemoteError struct {
	Op   string // "fetch" or "push"
	URL  string // without credentials
	Kind error  // ErrUnreachable, ErrAuth or ErrRejected
	Msg  string // scrubbed detail
	ctx  error
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("git %s %s: %s: %s", e.Op, e.URL, e.Kind.Error(), e.Msg)
}

// Unwrap returns the kind and, when the context ended the operation, its error.
func (e *RemoteError) Unwrap() []error {
	if e.ctx != nil {
		return []error{e.Kind, e.ctx}
	}
	return []error{e.Kind}
}

func (r *Remote) fail(ctx context.Context, op string, err error) error {
	kind := ErrUnreachable
	if errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) {
		kind = ErrAuth
	}
	var stalled *StalledError
	if errors.As(context.Cause(ctx), &stalled) {
		// The transport only saw its context cancelled: say why.
		return &RemoteError{Op: op, URL: r.display, Kind: ErrUnreachable, Msg: stalled.Error(), ctx: stalled}
	}
	return &RemoteError{Op: op, URL: r.display, Kind: kind, Msg: r.scrub(err.Error()), ctx: ctx.Err()}
}

// advertisedTip returns the remote's value of ref, or the zero hash when the
// repository or the ref does not exist yet.
func advertisedTip(ar *packp.AdvRefs, ref plumbing.ReferenceName) (plumbing.Hash, error) {
	refs, err := ar.AllReferences()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	h, err := refs.Reference(ref)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return h.Hash(), nil
}

// Fetch reads the remote tip of ref and, when the local store lacks it,
// downloads the objects it needs, telling the remote which commits we
// already have. It returns the remote tip (zero when the ref is absent).
// Objects are looked up in have (which must see what st wrote: the
// fetched tip is looked up there afterwards) and written to st.
//
// When stall is positive, the fetch fails with a *RemoteError (kind
// ErrUnreachable, unwrapping to a *StalledError) once one wait on the
// remote lasts longer than stall; a transfer that keeps moving is bounded
// by ctx alone.
func (r *Remote) Fetch(ctx context.Context, have storer.EncodedObjectStorer, st storer.Storer, ref plumbing.ReferenceName, haves []plumbing.Hash, stall time.Duration) (tip plumbing.Hash, err error) {
	ctx, guard, release := newStallGuard(ctx, stall)
	defer release()
	sess, err := r.client.NewUploadPackSession(r.ep, r.auth)
	if err != nil {
		return plumbing.ZeroHash, r.fail(ctx, "fetch", err)
	}
	defer func() {
		if cerr := sess.Close(); cerr != nil && err == nil {
			err = r.fail(ctx, "fetch", cerr)
		}
	}()
	guard.arm()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	guard.rest()
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, r.fail(ctx, "fetch", err)
	}
	tip, err = advertisedTip(ar, ref)
	if err != nil {
		return plumbing.ZeroHash, r.fail(ctx, "fetch", err)
	}
	if tip.IsZero() || have.HasEncodedObject(tip) == nil {
		return tip, nil
	}
	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	// A thin pack would be stored as is, with deltas against objects
	// outside it; ask for a self-contained one.
	req.Capabilities.Delete(capability.ThinPack)
	if ar.Capabilities.Supports(capability.NoProgress) {
		_ = req.Capabilities.Set(capability.NoProgress)
	}
	req.Wants = []plumbing.Hash{tip}
	for _, h := range haves {
		if !h.IsZero() && have.HasEncodedObject(h) == nil {
			req.Haves = append(req.Haves, h)
		}
	}
	guard.arm()
	resp, err := sess.UploadPack(ctx, req)
	guard.rest()
	if err != nil {
		return plumbing.ZeroHash, r.fail(ctx, "fetch", err)
	}
	defer resp.Close()
	rd := guard.reader(resp)
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		rd = sideband.NewDemuxer(sideband.Sideband64k, rd)
	case req.Capabilities.Supports(capability.Sideband):
		rd = sideband.NewDemuxer(sideband.Sideband, rd)
	}
	if err := packfile.UpdateObjectStorage(st, rd); err != nil {
		return plumbing.ZeroHash, r.fail(ctx, "fetch", err)
	}
	if err := have.HasEncodedObject(tip); err != nil {
		return plumbing.ZeroHash, r.fail(ctx, "fetch", fmt.Errorf("remote tip %s missing after fetch: %w", tip, err))
	}
	return tip, nil
}

// MovedError is a push refused because the remote ref was not at the
// old value the push built on: most likely another writer got there
// first, which a fetch tells.
type MovedError struct{ Status string }

func (e *MovedError) Error() string { return "remote branch moved: " + e.Status }

// Push sends exactly the objects in objs (a packfile built from st, which
// need hold nothing else) and asks the remote to move ref from old to
// new. The old value in the update command makes it a compare-and-swap:
// the remote refuses it when ref is anywhere else (a *MovedError). It
// never forces. A *RemoteError of kind ErrUnreachable leaves unknown
// whether the update landed.
//
// A local repository that a push would run no hook in is written in
// process (localpush.go), with the same compare-and-swap and errors.
func (r *Remote) Push(ctx context.Context, st storer.EncodedObjectStorer, ref plumbing.ReferenceName, old, new plumbing.Hash, objs []plumbing.Hash) (err error) {
	if repo, ok := r.localRepoFor(ref); ok && !new.IsZero() && (!repo.fastForwardOnly || fastForward(st, old, new)) {
		return r.pushLocal(ctx, repo, st, ref, old, new, objs)
	}
	sess, err := r.client.NewReceivePackSession(r.ep, r.auth)
	if err != nil {
		return r.fail(ctx, "push", err)
	}
	defer func() {
		if cerr := sess.Close(); cerr != nil && err == nil {
			err = r.fail(ctx, "push", cerr)
		}
	}()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return r.fail(ctx, "push", err)
	}
	if ar == nil {
		ar = packp.NewAdvRefs()
	}
	cur, err := advertisedTip(ar, ref)
	if err != nil {
		return r.fail(ctx, "push", err)
	}
	if cur != old {
		return &MovedError{Status: fmt.Sprintf("%s is at %s, not %s", ref, cur, old)}
	}
	var pack bytes.Buffer
	if err := writePack(&pack, st, objs); err != nil {
		return fmt.Errorf("gitobj: encode packfile: %w", err)
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	req.Commands = []*packp.Command{{Name: ref, Old: old, New: new}}
	req.Packfile = io.NopCloser(&pack)
	rs, err := sess.ReceivePack(ctx, req)
	if rs == nil {
		if err != nil {
			return r.fail(ctx, "push", err)
		}
		// No report at all (an empty answer): whether the update landed
		// is unknown until a fetch tells, as after a lost connection.
		// Taking the silence for success would record a tip the remote
		// may not have (a lost document, then a false rollback).
		return &RemoteError{Op: "push", URL: r.display, Kind: ErrUnreachable, Msg: "the remote answered the push without a report of the update", ctx: ctx.Err()}
	}
	// With a report, err is only the report's refusal, examined below.
	if rs.UnpackStatus != "ok" {
		return &RemoteError{Op: "push", URL: r.display, Kind: ErrRejected, Msg: r.scrub("unpack: " + rs.UnpackStatus)}
	}
	for _, cs := range rs.CommandStatuses {
		if cs.Status != "ok" {
			return &MovedError{Status: r.scrub(cs.ReferenceName.String() + ": " + cs.Status)}
		}
	}
	return nil
}
