package gitobj

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// A push to a local repository is written in process, under Git's own
// ref lock protocol: refs/…/NAME.lock created exclusively, the current
// value (loose ref, else packed-refs) compared with old, the new value
// written — taken once the objects are written as one pack with its
// index, which are synced together with the lock file and renamed in, the
// pack directory synced; only then the lock is renamed over the ref and
// the ref's directory synced. That is what receive-pack does for such a push, less the child
// processes, which cost more than the rest of an evidence append.
//
// Only where receive-pack would do nothing more: a bare repository, or a
// work tree whose checked-out branch is not the one pushed, with no
// hook that a push runs, no receive.* or core.hooksPath setting, and no
// repository extension (reftable, SHA-256 objects). Anything else, or a
// ref that is not a plain value, goes through receive-pack as before.

// pushHooks are the hooks receive-pack runs for a push.
var pushHooks = []string{"pre-receive", "update", "proc-receive", "post-receive", "post-update", "reference-transaction", "push-to-checkout"}

// localRepo is a local repository a push may write in process.
type localRepo struct {
	gitDir string
	reflog bool // core.logAllRefUpdates: append to logs/<ref>
	// fastForwardOnly is receive.denyNonFastForwards: new must have old
	// as its parent (anything else goes through receive-pack).
	fastForwardOnly bool
}

// localRepoFor returns the repository of r when r is a local repository
// that a push of ref may write in process, and false otherwise: a bare
// repository, or the .git directory of a work tree whose checked-out
// branch is not ref (receive-pack's denyCurrentBranch rules stay its own).
func (r *Remote) localRepoFor(ref plumbing.ReferenceName) (localRepo, bool) {
	if r.ep == nil || r.ep.Protocol != "file" {
		return localRepo{}, false
	}
	dir, wantBare := r.ep.Path, true
	if fi, err := os.Stat(filepath.Join(dir, ".git")); err == nil && fi.IsDir() {
		dir, wantBare = filepath.Join(dir, ".git"), false
	}
	for _, need := range []string{"HEAD", "objects", "refs"} {
		if _, err := os.Stat(filepath.Join(dir, need)); err != nil {
			return localRepo{}, false
		}
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config"))
	if err != nil {
		return localRepo{}, false
	}
	bare, reflog, ffOnly, plain := plainConfig(cfg)
	if !plain || bare != wantBare {
		return localRepo{}, false
	}
	if !bare {
		head, err := os.ReadFile(filepath.Join(dir, "HEAD"))
		if err != nil || strings.TrimSpace(string(head)) == "ref: "+ref.String() {
			return localRepo{}, false
		}
	}
	for _, h := range pushHooks {
		if fi, err := os.Stat(filepath.Join(dir, "hooks", h)); err == nil && fi.Mode()&0o111 != 0 {
			return localRepo{}, false
		}
	}
	return localRepo{gitDir: dir, reflog: reflog, fastForwardOnly: ffOnly}, true
}

// plainConfig reads a repository config (Git's ini format): whether it is
// bare, whether ref updates are logged (core.logAllRefUpdates, whose
// default is true in a work tree), whether only fast-forwards are allowed
// (receive.denyNonFastForwards), and whether it sets nothing else that
// makes receive-pack do more than store objects and move a ref: no
// receive.* setting but denyNonFastForwards and denyDeletes (a push here
// never deletes), no [extensions] or [include] section, no core.hooksPath
// or core.sharedRepository.
func plainConfig(cfg []byte) (bare, reflog, ffOnly, plain bool) {
	section := ""
	logSet := false
	sc := bufio.NewScanner(bytes.NewReader(cfg))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			name, _, _ := strings.Cut(strings.Trim(line, "[]"), " ")
			section = strings.ToLower(strings.TrimSpace(name))
			switch section {
			case "core", "receive", "remote", "branch", "gc", "pack", "user", "fetch", "transfer", "uploadpack", "protocol", "advice", "init", "color":
			default:
				return false, false, false, false // extensions, include, includeif, …
			}
			continue
		}
		key, val, _ := strings.Cut(line, "=")
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.ToLower(strings.TrimSpace(val))
		yes := val == "true" || val == "yes" || val == "on" || val == "1"
		switch section {
		case "receive":
			switch key {
			case "denynonfastforwards":
				ffOnly = yes
			case "denydeletes":
			default:
				return false, false, false, false // fsckObjects, denyCurrentBranch, …
			}
		case "core":
			switch key {
			case "bare":
				bare = yes
			case "logallrefupdates":
				if val != "true" && val != "false" && val != "" {
					return false, false, false, false // "always" and other forms
				}
				reflog, logSet = val == "true", true
			case "hookspath", "sharedrepository":
				return false, false, false, false
			}
		}
	}
	if !logSet {
		reflog = !bare
	}
	return bare, reflog, ffOnly, sc.Err() == nil
}

// fastForward reports whether new's only parent is old (or old is zero:
// a new branch), reading new from st.
func fastForward(st storer.EncodedObjectStorer, old, new plumbing.Hash) bool {
	if old.IsZero() {
		return true
	}
	o, err := st.EncodedObject(plumbing.CommitObject, new)
	if err != nil {
		return false
	}
	rd, err := o.Reader()
	if err != nil {
		return false
	}
	defer rd.Close()
	raw, err := io.ReadAll(io.LimitReader(rd, 1<<20))
	if err != nil {
		return false
	}
	h, err := ParseCommitHeader(raw)
	return err == nil && len(h.Parents) == 1 && h.Parents[0] == old
}

// pushLocal is Push to the local bare repository dir, in process.
func (r *Remote) pushLocal(ctx context.Context, repo localRepo, st storer.EncodedObjectStorer, ref plumbing.ReferenceName, old, new plumbing.Hash, objs []plumbing.Hash) error {
	if err := ctx.Err(); err != nil {
		return &RemoteError{Op: "push", URL: r.display, Kind: ErrUnreachable, Msg: err.Error(), ctx: err}
	}
	dir := repo.gitDir
	if !strings.HasPrefix(ref.String(), "refs/heads/") || strings.Contains(ref.String(), "..") {
		return &RemoteError{Op: "push", URL: r.display, Kind: ErrRejected, Msg: fmt.Sprintf("%s is not a branch name", ref)}
	}
	reject := func(err error) error {
		return &RemoteError{Op: "push", URL: r.display, Kind: ErrRejected, Msg: r.scrub(err.Error())}
	}
	refPath := filepath.Join(dir, filepath.FromSlash(ref.String()))
	if err := os.MkdirAll(filepath.Dir(refPath), 0o777); err != nil {
		return reject(err)
	}
	var (
		lock    *os.File
		renamed bool
	)
	defer func() {
		if lock != nil {
			lock.Close()
			if !renamed {
				os.Remove(refPath + ".lock")
			}
		}
	}()
	// takeLock takes the ref's lock, compares the ref with old and writes
	// the new value into the lock file, not yet synced.
	takeLock := func() error {
		f, err := os.OpenFile(refPath+".lock", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			// Another writer is moving the ref now: nothing landed, and
			// whether the ref moves is not known yet. Like a lost
			// connection, the caller fetches and tries again.
			return &RemoteError{Op: "push", URL: r.display, Kind: ErrUnreachable, Msg: lockHeld(ref, refPath+".lock")}
		}
		if err != nil {
			return reject(err)
		}
		lock = f
		cur, err := readLocalRef(dir, refPath, ref)
		if err != nil {
			return reject(err)
		}
		if cur != old {
			return &MovedError{Status: fmt.Sprintf("%s is at %s, not %s", ref, cur, old)}
		}
		if _, err := lock.WriteString(new.String() + "\n"); err != nil {
			return reject(err)
		}
		return nil
	}
	// The objects before the ref: a pack no ref reaches is harmless, a
	// ref to objects not yet durable is not. The lock is taken once the
	// pack and its index are written, and its file is synced together
	// with them (one wait instead of three); it becomes the ref only once
	// the pack is in place and its directory synced.
	if len(objs) > 0 {
		var lockErr error
		packDir := filepath.Join(dir, "objects", "pack")
		name, err := writeIndexedPack(packDir, len(objs), func(pw *packWriter, add func(plumbing.Hash, uint64, uint32)) error {
			return pw.addObjects(st, objs, add)
		}, func() ([]*os.File, error) {
			if lockErr = takeLock(); lockErr != nil {
				return nil, lockErr
			}
			return []*os.File{lock}, nil
		})
		if lockErr != nil {
			return lockErr
		}
		if err != nil {
			return reject(fmt.Errorf("unpack: %w", err))
		}
		// Git's packs are read-only to everyone who may read the repository.
		base := filepath.Join(packDir, "pack-"+name.String())
		for _, ext := range []string{".idx", ".pack"} {
			if err := os.Chmod(base+ext, 0o444); err != nil {
				return reject(fmt.Errorf("unpack: %w", err))
			}
		}
	} else {
		if err := takeLock(); err != nil {
			return err
		}
		if err := lock.Sync(); err != nil {
			return reject(err)
		}
	}
	if err := lock.Close(); err != nil {
		return reject(err)
	}
	if err := os.Rename(refPath+".lock", refPath); err != nil {
		return reject(err)
	}
	renamed = true
	if repo.reflog {
		if err := appendReflog(dir, ref, old, new); err != nil {
			return &RemoteError{Op: "push", URL: r.display, Kind: ErrUnreachable, Msg: r.scrub("the ref moved; its reflog: " + err.Error())}
		}
	}
	if err := syncPath(filepath.Dir(refPath)); err != nil {
		// The ref moved; only its durability is in doubt.
		return &RemoteError{Op: "push", URL: r.display, Kind: ErrUnreachable, Msg: r.scrub(err.Error())}
	}
	return nil
}

// readLocalRef returns ref's value in the repository dir: its loose file
// at refPath, else its line in packed-refs, else the zero hash. A symbolic
// or malformed value is an error.
func readLocalRef(dir, refPath string, ref plumbing.ReferenceName) (plumbing.Hash, error) {
	b, err := os.ReadFile(refPath)
	switch {
	case err == nil:
		v := strings.TrimSpace(string(b))
		if !plumbing.IsHash(v) {
			return plumbing.ZeroHash, fmt.Errorf("%s holds %q, not an object name", ref, v)
		}
		return plumbing.NewHash(v), nil
	case !errors.Is(err, fs.ErrNotExist):
		return plumbing.ZeroHash, err
	}
	packed, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	if errors.Is(err, fs.ErrNotExist) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, err
	}
	for line := range strings.SplitSeq(string(packed), "\n") {
		h, name, ok := strings.Cut(line, " ")
		if ok && name == ref.String() {
			if !plumbing.IsHash(h) {
				return plumbing.ZeroHash, fmt.Errorf("packed-refs: %s holds %q, not an object name", ref, h)
			}
			return plumbing.NewHash(h), nil
		}
	}
	return plumbing.ZeroHash, nil
}

// appendReflog appends the update of ref to its reflog, as receive-pack
// does where core.logAllRefUpdates is on.
func appendReflog(dir string, ref plumbing.ReferenceName, old, new plumbing.Hash) error {
	name := filepath.Join(dir, "logs", filepath.FromSlash(ref.String()))
	if err := os.MkdirAll(filepath.Dir(name), 0o777); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	now := time.Now()
	_, err = fmt.Fprintf(f, "%s %s signet <signet@localhost> %d %s\tpush\n", old, new, now.Unix(), now.Format("-0700"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// staleLockAge is how old a ref's lock file must be before a push that
// finds it says how to remove it: a writer holds one for milliseconds.
const staleLockAge = time.Minute

// lockHeld says that ref's lock (file lock) is held. A lock older than
// staleLockAge is most likely left by a writer that died mid-push (git
// never removes another process's lock, nor does signet): the message
// then says since when, and to remove it once no writer runs, as git's
// own does.
func lockHeld(ref plumbing.ReferenceName, lock string) string {
	msg := fmt.Sprintf("%s: another writer holds %s.lock; try again", ref, ref)
	fi, err := os.Stat(lock)
	if err != nil {
		return msg
	}
	if age := time.Since(fi.ModTime()); age >= staleLockAge {
		msg += fmt.Sprintf(" (held since %s, %s ago: if no git or signet process is writing to this repository, one that crashed left it; remove %s)",
			fi.ModTime().UTC().Format(time.RFC3339), age.Round(time.Second), lock)
	}
	return msg
}
