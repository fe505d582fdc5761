package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/internal/crash"
	"signet.dev/signet/internal/gitobj"
)

var (
	// ErrExists means a path given to Append already exists on the branch
	// tip: another writer won that step. Nothing was written; abandon the
	// step, never overwrite.
	ErrExists = errors.New("evidence: path already exists on the evidence branch")
	// ErrRolledBack means the remote tip does not descend from the last tip
	// this store pushed or verified: the branch was rewritten or reset. The
	// store refuses to act until a person has looked.
	ErrRolledBack = errors.New("evidence: remote branch does not descend from the last known tip (rolled back)")
	// ErrNotFound means the path is not on the tip the store last fetched
	// or pushed.
	ErrNotFound = errors.New("evidence: not found on the evidence branch")
	// ErrUnreachable means the remote could not be reached or failed while
	// talking; retry later.
	ErrUnreachable = gitobj.ErrUnreachable
	// ErrAuth means the remote refused the credentials; a person must act.
	ErrAuth = gitobj.ErrAuth
	// ErrRejected means the remote refused an update for a reason other
	// than a lost race (a hook, a permission, a corrupt pack).
	ErrRejected = gitobj.ErrRejected
	// ErrTipMoved means the branch tip is no longer the one an AppendAt
	// was decided from (a *StaleTipError unwraps to it when none of its
	// paths exists on the new tip): nothing was written; read the new tip
	// and decide again.
	ErrTipMoved = errors.New("evidence: the branch tip moved since the decision")
	// ErrInvalidPath means a path given to the store is not a clean,
	// relative, slash-separated path of the evidence layout.
	ErrInvalidPath = errors.New("evidence: invalid path")
)

// Auth holds the credentials for the evidence remote; it prints redacted.
type Auth = gitobj.Auth

// RemoteError is a failure to talk to the evidence remote (see
// gitobj.RemoteError); it unwraps to ErrUnreachable, ErrAuth or ErrRejected.
type RemoteError = gitobj.RemoteError

// DefaultBranch is the evidence branch when StoreOptions.Branch is empty.
const DefaultBranch = "signet/evidence"

// DefaultTimeout bounds one Append, retries included, when
// StoreOptions.Timeout is zero.
const DefaultTimeout = 2 * time.Minute

// File is one document to append: a slash-separated path relative to the
// branch root, and its bytes.
type File struct {
	Path string
	Data []byte
}

// StoreOptions configures a Store.
type StoreOptions struct {
	// URL of the remote: a local path, file://, http(s)://, ssh:// or
	// scp-like user@host:path. Credentials in an http(s) URL are used as
	// basic auth and never shown.
	URL string
	// Branch is the evidence branch, DefaultBranch when empty.
	Branch string
	// Auth is the credentials for the remote.
	Auth Auth
	// CommitSigner signs every commit (an SSH signature, sshsig namespace
	// "git", SHA-512, in the gpgsig header). Required.
	CommitSigner ssh.Signer
	// Author and Email name the author and committer of every commit.
	Author, Email string
	// StateDir holds the local bare mirror and the last known tip across
	// restarts. One Store at a time may use it (it is locked).
	StateDir string
	// Timeout bounds one Append or Refresh, retries included, and each
	// call on the Keeper; DefaultTimeout when zero. Open's fetch, which
	// may bring the whole branch, is bounded by its context instead, and
	// every fetch gives up when the remote sends nothing for Timeout.
	Timeout time.Duration
	// Logger receives what the store does in the background (consolidating
	// the mirror's packs); slog.Default() when nil.
	Logger *slog.Logger
	// Keeper, when set, keeps the last known tip besides StateDir, where a
	// restart that loses StateDir cannot lose it. The remote tip must
	// descend from both; every new verified tip is swapped into it.
	Keeper TipKeeper
	// Pinned is a tip an operator pinned (40 hex, as `signet audit`
	// prints it): the remote tip must descend from it at Open. With
	// neither a remembered nor a pinned tip, Open of an existing branch
	// fails with ErrUnanchored unless AcceptCurrentTip is set.
	Pinned string
	// AcceptCurrentTip trusts the branch's tip at Open when nothing
	// remembered or pinned holds it (logged); from then on it is
	// remembered like any other tip. A branch that does not exist yet
	// needs no anchor: nothing can have been rolled back.
	AcceptCurrentTip bool
	// Now is the clock of commit times (time.Now when nil): the
	// reconciler's own clock, so that documents are never dated after
	// the commits that add them.
	Now func() time.Time
}

// Store is an append-only evidence branch on a Git remote. Its methods
// are safe for concurrent use; appends of one Store are serialized.
type Store struct {
	opts   StoreOptions
	remote *gitobj.Remote
	ref    plumbing.ReferenceName
	st     *filesystem.Storage // the local bare mirror
	// packDir is the mirror's pack directory, where a fetch installs its
	// pack (fetchTarget).
	packDir string
	lock    *os.File

	// Objects this store created since the last flush, kept in memory and
	// written to the mirror as one packfile every flushObjects objects and
	// on Close (a loose file per object would cost more than the rest of an
	// append). They are on the remote already; after a crash a fetch
	// brings them back.
	overlay *memory.ObjectStorage
	objs    layered
	fast    *gitobj.Dir // the mirror's objects, read directly

	// Consolidation of the mirror's packs runs in the background, one at a
	// time (repackBusy); Close waits for it.
	repacking  sync.WaitGroup
	repackBusy atomic.Bool

	// gmu guards waiting: the Appends waiting for mu, which whoever
	// holds mu next writes as one group commit.
	gmu     sync.Mutex
	waiting []*pendingAppend

	mu     sync.Mutex
	tip    plumbing.Hash // last remote tip fetched or pushed, verified to descend from the one before
	pushed plumbing.Hash // last tip this store pushed
	kept   KeptTip       // the Keeper's record as last read or swapped
	pinned plumbing.Hash // StoreOptions.Pinned until a fetched tip was verified against it
	// unanchored: nothing held the tip at Open; the first fetch decides
	// (ErrUnanchored, AcceptCurrentTip, or first use of a new branch).
	unanchored bool
	firstUse   bool // StateDir says this store found no branch (state.FirstUse)
	closed     bool
}

// state is what StateDir remembers across restarts.
type state struct {
	URL    string `json:"url"`
	Branch string `json:"branch"`
	Tip    string `json:"tip"`
	Pushed string `json:"pushed,omitempty"`
	// FirstUse: the store found no branch and may have created it; a
	// crash between its first push and the next state write leaves the
	// branch it created and no tip.
	FirstUse bool `json:"firstUse,omitempty"`
}

const (
	stateFile = "state.json"
	lockFile  = "lock"
	mirrorDir = "mirror.git"
)

// Open opens the store: it locks StateDir, opens (or creates) the local
// bare mirror there, and fetches the branch. A remote tip that does not
// descend from the tip StateDir remembers, the Keeper keeps or Pinned
// names fails with ErrRolledBack (as does a missing branch). With none of
// the three and an existing branch, Open fails with ErrUnanchored unless
// AcceptCurrentTip is set; a branch that does not exist yet is first use.
func Open(ctx context.Context, opts StoreOptions) (*Store, error) {
	if opts.Branch == "" {
		opts.Branch = DefaultBranch
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ref := plumbing.NewBranchReferenceName(opts.Branch)
	if err := ref.Validate(); err != nil || strings.HasPrefix(opts.Branch, "refs/") {
		return nil, fmt.Errorf("evidence: StoreOptions.Branch %q is not a valid branch name", opts.Branch)
	}
	switch {
	case opts.CommitSigner == nil:
		return nil, errors.New("evidence: StoreOptions.CommitSigner is required: every commit is signed")
	case opts.StateDir == "":
		return nil, errors.New("evidence: StoreOptions.StateDir is required")
	case opts.Author == "" || opts.Email == "":
		return nil, errors.New("evidence: StoreOptions.Author and Email are required")
	case strings.ContainsAny(opts.Author, "<>\n\x00") || strings.ContainsAny(opts.Email, "<>\n\x00 "):
		return nil, fmt.Errorf("evidence: StoreOptions.Author %q or Email %q holds a character Git refuses in an identity", opts.Author, opts.Email)
	case opts.Pinned != "" && !IsCommitHash(opts.Pinned):
		return nil, fmt.Errorf("evidence: StoreOptions.Pinned %q is not a commit hash (40 lowercase hex)", opts.Pinned)
	}
	rm, err := gitobj.NewRemote(opts.URL, opts.Auth)
	if err != nil {
		return nil, fmt.Errorf("evidence: StoreOptions: %w", err)
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("evidence: StateDir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(opts.StateDir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("evidence: StateDir: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("evidence: StateDir %s is in use by another store: %w", opts.StateDir, err)
	}
	s := &Store{opts: opts, remote: rm, ref: ref, lock: lock}
	if err := s.open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// storeBaseBytes bounds the delta base cache of the store's mapped packs
// (gitobj.Dir.LimitBaseCache).
const storeBaseBytes = 16 << 20

func (s *Store) open(ctx context.Context) error {
	dir := filepath.Join(s.opts.StateDir, mirrorDir)
	// Not ExclusiveAccess: with it, go-git v5.19.3 does not find objects
	// of a pack written through PackfileWriter (every fetch).
	s.st = filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(),
		filesystem.Options{KeepDescriptors: true})
	s.packDir = filepath.Join(dir, "objects", "pack")
	s.overlay = newOverlay()
	if _, err := os.Stat(filepath.Join(dir, "config")); errors.Is(err, os.ErrNotExist) {
		if _, err := git.Init(s.st, nil); err != nil {
			return fmt.Errorf("evidence: init mirror %s: %w", dir, err)
		}
	}
	// A crash while a pack was written leaves its temporary files: no
	// other process writes here (StateDir is locked).
	if err := gitobj.RemoveTempPacks(s.packDir); err != nil {
		return fmt.Errorf("evidence: mirror %s: %w", dir, err)
	}
	// Base trees are read through mapped packs (gitobj.Dir): go-git's
	// pack reader seeks and reads per object, which was the part of an
	// append that grew with the branch.
	fast, err := gitobj.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("evidence: open mirror objects %s: %w", dir, err)
	}
	// A reconciler reads each run's documents about once (recovery, the
	// runs in flight): a small delta base cache keeps its memory bounded
	// by the work in flight (issue 19).
	fast.LimitBaseCache(storeBaseBytes)
	// Its reads are lookups here and there (recovery, an append's base
	// trees): under a memory limit smaller than the pack (1.4 GB at 10^5
	// runs), read-around made each page fault read megabytes (issue 19).
	fast.AdviseRandom()
	s.fast = fast
	s.objs = layered{EncodedObjectStorer: s.st, top: s.overlay, fast: fast, trees: &treeCache{}}
	b, err := os.ReadFile(filepath.Join(s.opts.StateDir, stateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("evidence: read state: %w", err)
	default:
		var st state
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("evidence: %s: %w", filepath.Join(s.opts.StateDir, stateFile), err)
		}
		if st.URL != s.remote.URL() || st.Branch != s.opts.Branch {
			return fmt.Errorf("evidence: StateDir %s remembers %s branch %s, not %s branch %s: use another StateDir",
				s.opts.StateDir, st.URL, st.Branch, s.remote.URL(), s.opts.Branch)
		}
		// The mirror may lack the remembered tip (a crash before a
		// flush): the fetch brings it back, or proves a rollback.
		s.tip, s.pushed = plumbing.NewHash(st.Tip), plumbing.NewHash(st.Pushed)
		s.firstUse = st.FirstUse && s.tip.IsZero()
	}
	if err := s.loadKept(ctx); err != nil {
		return err
	}
	if s.opts.Pinned != "" {
		s.pinned = plumbing.NewHash(s.opts.Pinned)
	}
	s.unanchored = s.tip.IsZero() && s.kept.Tip == "" && s.pinned.IsZero()
	// Not bounded by Timeout: a new mirror, or one far behind, fetches
	// the whole branch or much of it (a 1.4 GB pack at 10^5 runs, longer than
	// the 2 minutes of one append on two cores). The fetch gives up when
	// the remote goes quiet for Timeout; the rest is the caller's ctx.
	//
	// Under s.mu as every other caller of refresh: the fetch can start a
	// consolidation (consolidate), whose removal of the packs it replaced
	// unmaps them while the ancestry check after it reads them.
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refresh(ctx)
}

// ID identifies the store's evidence branch without naming its remote:
// the branch name and the first 12 hex digits of the SHA-256 of the
// remote's URL as shown (credentials removed). It is what a reconciler
// writes into its node reservations (kube.FleetOptions.Evidence).
func (s *Store) ID() string {
	sum := sha256.Sum256([]byte(s.remote.URL()))
	return s.opts.Branch + "@" + hex.EncodeToString(sum[:6])
}

// Close releases StateDir. The store is unusable afterwards.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var errs []error
	if s.st != nil {
		errs = append(errs, s.flush())
	}
	s.mu.Unlock()
	// A consolidation reads the mapped packs until it is done.
	s.repacking.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st != nil {
		errs = append(errs, s.st.Close())
	}
	if s.fast != nil {
		s.fast.Close()
	}
	errs = append(errs, s.lock.Close())
	return errors.Join(errs...)
}

// Append commits files to the branch in one signed commit and pushes it.
// It is create-only: when any path already exists on the tip it builds on,
// it returns ErrExists and writes nothing. The push is a compare-and-swap
// from the tip it built on; when another writer moved the branch first,
// Append fetches, rebuilds on the new tip (ErrExists again if a path now
// exists) and retries, within StoreOptions.Timeout. It never forces.
// It returns the new commit's hash once the remote has accepted it.
//
// Appends that arrive while another is being written are committed
// together (group commit): whoever takes the store next writes all that
// are waiting as one signed commit and one push, and each of them returns
// only once that commit has landed, so a caller's own step is still
// durable before its next effect. When a path of one of them exists (on
// the tip, or in another of the group), each is written on its own, in
// the order they arrived: only that one fails with ErrExists. A group's
// retries stop when every member's context is done, or after Timeout.
func (s *Store) Append(ctx context.Context, message string, files []File) (string, error) {
	if len(files) == 0 {
		return "", fmt.Errorf("%w: no files to append", ErrInvalidPath)
	}
	if _, err := newChangeTree(files); err != nil {
		return "", err
	}
	p := &pendingAppend{ctx: ctx, message: message, files: files}
	s.gmu.Lock()
	s.waiting = append(s.waiting, p)
	s.gmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !p.done { // else a group that held the store meanwhile wrote it
		s.gmu.Lock()
		group := s.waiting
		s.waiting = nil
		s.gmu.Unlock()
		s.appendGroup(group)
	}
	if !p.done { // appendGroup answers every member it takes
		return "", errors.New("evidence: append: returned without being written")
	}
	return p.commit, p.err
}

// pendingAppend is an Append waiting for the store: done, commit and err
// are set, under s.mu, by the append that writes it.
type pendingAppend struct {
	ctx     context.Context
	message string
	files   []File
	done    bool
	commit  string
	err     error
}

func (p *pendingAppend) finish(commit string, err error) {
	p.done, p.commit, p.err = true, commit, err
}

// appendGroup writes the appends of group, in one commit when it can
// (see Append). The caller holds s.mu.
func (s *Store) appendGroup(group []*pendingAppend) {
	live := make([]*pendingAppend, 0, len(group))
	for _, p := range group {
		if err := p.ctx.Err(); err != nil {
			p.finish("", err) // gave up while waiting: nothing written
			continue
		}
		live = append(live, p)
	}
	if len(live) > 1 {
		var all []File
		for _, p := range live {
			all = append(all, p.files...)
		}
		if root, err := newChangeTree(all); err == nil {
			ctx, stop := groupContext(live)
			commit, err := s.commitLocked(ctx, groupMessage(live), root, nil, nil)
			stop()
			if !errors.Is(err, ErrExists) {
				if err == nil {
					// Landed, and no member knows it yet.
					crash.Point("after-group-commit")
				}
				for _, p := range live {
					p.finish(commit, err)
				}
				return
			}
		}
		// Two of them write one path, or one writes a path the tip
		// has: each on its own, so that only that one fails.
	}
	for _, p := range live {
		root, err := newChangeTree(p.files)
		if err == nil {
			var commit string
			commit, err = s.commitLocked(p.ctx, appendMessage(p.message, len(p.files)), root, nil, nil)
			p.finish(commit, err)
			continue
		}
		p.finish("", err)
	}
}

// groupContext is done once every member's context is done; stop
// releases it.
func groupContext(group []*pendingAppend) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(group[0].ctx))
	var left atomic.Int32
	left.Store(int32(len(group)))
	stops := make([]func() bool, len(group))
	for i, p := range group {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// appendMessage is an append's commit message: message, or a default,
// ending in a newline.
func appendMessage(message string, files int) string {
	if message == "" {
		message = fmt.Sprintf("evidence: append %d files", files)
	}
	if !strings.HasSuffix(message, "\n") {
		message += "\n"
	}
	return message
}

// groupMessage is the commit message of a group commit: a summary line,
// then each member's message in the order they arrived.
func groupMessage(group []*pendingAppend) string {
	var b strings.Builder
	fmt.Fprintf(&b, "evidence: %d appends in one commit\n", len(group))
	for _, p := range group {
		b.WriteString("\n")
		b.WriteString(appendMessage(p.message, len(p.files)))
	}
	return b.String()
}

// StaleTipError is AppendAt's refusal: the branch is at Tip, not at Base,
// the tip the caller decided from. Nothing was written. It unwraps to
// ErrExists when a path of the append (Path, the first found) exists on
// Tip, another writer's record of the same step: the caller lost the race.
// Otherwise it unwraps to ErrTipMoved. Either way the caller reads Tip and
// decides again; the store never re-applies the decision on Tip.
type StaleTipError struct {
	Base, Tip string
	Path      string
}

func (e *StaleTipError) Error() string {
	base := e.Base
	if base == "" {
		base = "no branch"
	}
	if e.Path != "" {
		return fmt.Sprintf("%v: %s, at %s (decided from %s): another writer won the race", ErrExists, e.Path, e.Tip, base)
	}
	return fmt.Sprintf("%v: decided from %s, the branch is at %s", ErrTipMoved, base, e.Tip)
}

// Unwrap returns ErrExists or ErrTipMoved.
func (e *StaleTipError) Unwrap() error {
	if e.Path != "" {
		return ErrExists
	}
	return ErrTipMoved
}

// AppendAt is Append with a strict compare-and-swap: files are committed
// only as a child of base (a commit hash, "" for a branch that does not
// exist yet), the tip a decision was computed from. When the branch is
// elsewhere, because the store already knows a newer tip or because the
// push lost to another writer, it returns a *StaleTipError and writes
// nothing: a decision made on base is never re-applied on another tip.
// It is create-only like Append, retries a push that may not have been
// heard from the same base, and returns the new commit's hash.
func (s *Store) AppendAt(ctx context.Context, message, base string, files []File) (string, error) {
	if base != "" && !IsCommitHash(base) {
		return "", fmt.Errorf("evidence: AppendAt: base %q is not a commit hash (40 lowercase hex)", base)
	}
	h := plumbing.NewHash(base)
	return s.append(ctx, message, files, &h)
}

// append commits files only on *base (AppendAt).
func (s *Store) append(ctx context.Context, message string, files []File, base *plumbing.Hash) (string, error) {
	if len(files) == 0 {
		return "", fmt.Errorf("%w: no files to append", ErrInvalidPath)
	}
	root, err := newChangeTree(files)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commitLocked(ctx, appendMessage(message, len(files)), root, files, base)
}

// commitLocked commits root on the tip, or only on *base when base is set
// (files are then root's, for StaleTipError), pushes it and retries as
// Append describes. The caller holds s.mu.
func (s *Store) commitLocked(ctx context.Context, message string, root *gitobj.Changes, files []File, base *plumbing.Hash) (string, error) {
	if s.closed {
		return "", errors.New("evidence: store is closed")
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()

	var (
		pending  []plumbing.Hash // commits whose push may have landed unheard
		lastErr  error
		refetch  bool
		rejected string // status of a refused push, pending a fetch to tell why
	)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			// Back off a little, with jitter, so that two writers racing
			// for the same tip do not keep colliding.
			d := time.Duration(rand.Int64N(int64(min(attempt, 8))*int64(10*time.Millisecond)) + 1)
			select {
			case <-ctx.Done():
				return "", errors.Join(lastErr, fmt.Errorf("evidence: append gave up after %d attempts: %w", attempt, ctx.Err()))
			case <-time.After(d):
			}
		}
		if refetch {
			before := s.tip
			if err := s.refresh(ctx); err != nil {
				if errors.Is(err, ErrRolledBack) || errors.Is(err, ErrAuth) {
					return "", err
				}
				lastErr = err
				continue
			}
			for _, p := range pending {
				ok, err := descends(s.objs, s.tip, p, before)
				if err != nil {
					return "", err
				}
				if ok { // an earlier push landed though we did not hear back
					if err := s.setTip(ctx, s.tip, true); err != nil {
						return "", err
					}
					return p.String(), nil
				}
			}
			if rejected != "" && s.tip == before {
				// Refused, yet nobody else moved the branch: not a race.
				return "", &RemoteError{Op: "push", URL: s.remote.URL(), Kind: ErrRejected, Msg: rejected}
			}
			refetch, rejected = false, ""
		}
		if base != nil && s.tip != *base {
			return "", s.staleTip(*base, files)
		}
		b := gitobj.NewBuilder(s.objs)
		commit, err := b.Commit(s.tip, root, message, s.signature(), s.signCommit)
		if errors.Is(err, gitobj.ErrExists) {
			return "", fmt.Errorf("%w: %w", ErrExists, err)
		}
		if err != nil {
			return "", fmt.Errorf("evidence: build commit: %w", err)
		}
		// The state file that will record the new tip is written and
		// synced while the push runs; it replaces the old one only once
		// the push has landed.
		staged := s.stageState(commit, true)
		err = s.remote.Push(ctx, b.Objects(), s.ref, s.tip, commit, b.Hashes())
		if err != nil {
			staged.discard()
		}
		var moved *gitobj.MovedError
		switch {
		case err == nil:
			if err := s.keep(b); err != nil {
				staged.discard()
				return "", err
			}
			if err := s.putTip(ctx, commit, true, staged); err != nil {
				return "", err
			}
			return commit.String(), nil
		case errors.As(err, &moved):
			// Most likely another writer moved the branch first.
			rejected, lastErr, refetch = moved.Status, err, true
		case errors.Is(err, ErrUnreachable):
			// The push may or may not have landed: remember it and
			// recognize it on the next fetch.
			if err := s.keep(b); err != nil {
				return "", err
			}
			pending = append(pending, commit)
			lastErr, refetch = err, true
		default:
			return "", err
		}
	}
}

// staleTip is AppendAt's refusal on the tip: the first path of files that
// exists there, if any. The caller holds s.mu.
func (s *Store) staleTip(base plumbing.Hash, files []File) error {
	e := &StaleTipError{Base: hashText(base), Tip: hashText(s.tip)}
	for _, f := range files {
		if _, err := s.lookup(f.Path); err == nil {
			e.Path = f.Path
			break
		}
	}
	return e
}

// flushObjects is how many created objects the store keeps in memory
// before writing them to the mirror as one packfile (about 90 appends of
// a run's 21 documents).
var flushObjects = 2048

// keep moves the objects of a built commit into the overlay, flushing it
// when full.
func (s *Store) keep(b *gitobj.Builder) error {
	if err := b.Persist(s.overlay); err != nil {
		return fmt.Errorf("evidence: %w", err)
	}
	if len(s.overlay.Objects) >= flushObjects {
		return s.flush()
	}
	return nil
}

// flush writes the overlay to the mirror as one packfile and points the
// mirror's branch at the tip, so that the mirror is always a complete
// repository (stock git can read it).
func (s *Store) flush() error {
	if len(s.overlay.Objects) > 0 {
		hashes := make([]plumbing.Hash, 0, len(s.overlay.Objects))
		for h := range s.overlay.Objects {
			hashes = append(hashes, h)
		}
		if _, err := s.fast.AddPack(s.overlay, hashes); err != nil {
			return fmt.Errorf("evidence: write mirror pack: %w", err)
		}
		// go-git finds the new pack when it next needs its indexes.
		s.st.Reindex()
		for h, o := range s.overlay.Trees {
			if b, err := gitobj.ReadEncoded(o, 0); err == nil {
				s.objs.trees.put(h, b)
			}
		}
		s.overlay = newOverlay()
		s.objs.top = s.overlay
		s.consolidate()
	}
	return s.syncMirrorRef()
}

// consolidate starts a consolidation of the mirror's packs (see repack)
// in the background, unless one is running or the store is closing: an
// append does not wait for it. A failure costs only lookups in more
// packs, so it is logged: the append or fetch before it has succeeded.
// The caller holds s.mu.
func (s *Store) consolidate() {
	if s.closed || !s.repackBusy.CompareAndSwap(false, true) {
		return
	}
	s.repacking.Go(func() {
		defer s.repackBusy.Store(false)
		if err := s.repack(); err != nil {
			s.opts.Logger.Warn("evidence: consolidating the mirror's packs failed; will retry after the next pack",
				"mirror", filepath.Join(s.opts.StateDir, mirrorDir), "err", err)
		}
	})
}

// syncMirrorRef points the mirror's branch at the tip once the mirror
// holds it.
func (s *Store) syncMirrorRef() error {
	if s.tip.IsZero() || s.objs.onDisk(s.tip) != nil {
		return nil
	}
	if err := s.st.SetReference(plumbing.NewHashReference(s.ref, s.tip)); err != nil {
		return fmt.Errorf("evidence: mirror ref: %w", err)
	}
	return nil
}

// signCommit signs a commit's payload with the CommitSigner: an SSH
// signature (sshsig namespace "git", SHA-512) as `git verify-commit` with
// gpg.format=ssh expects.
func (s *Store) signCommit(payload io.Reader) ([]byte, error) {
	sig, err := sshsig.Sign(payload, s.opts.CommitSigner, sshsig.HashSHA512, "git")
	if err != nil {
		return nil, err
	}
	return sshsig.Armor(sig), nil
}

func (s *Store) signature() object.Signature {
	now := time.Now
	if s.opts.Now != nil {
		now = s.opts.Now
	}
	return object.Signature{Name: s.opts.Author, Email: s.opts.Email, When: now().Truncate(time.Second)}
}
