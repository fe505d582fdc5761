package evidencetest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"signet.dev/signet/signing"
)

// Copy is a bare copy of the fixture's evidence branch that a test may
// tamper with, using stock git plumbing only (hash-object, read-tree,
// update-index, write-tree, commit-tree -S, update-ref).
type Copy struct {
	Dir        string
	SSHKeyFile string
}

// Clone copies the evidence branch into a new bare repository at dir.
func (f *Fixture) Clone(dir string) (*Copy, error) {
	if _, err := Git("", nil, "clone", "-q", "--bare", "--single-branch", "--branch", Branch, "--no-tags", f.Repo, dir); err != nil {
		return nil, err
	}
	return &Copy{Dir: dir, SSHKeyFile: f.SSHKeyFile}, nil
}

// Git runs git in the copy.
func (c *Copy) Git(args ...string) (string, error) { return Git(c.Dir, nil, args...) }

// Tip returns the branch's tip.
func (c *Copy) Tip() (string, error) { return c.Git("rev-parse", "refs/heads/"+Branch) }

// Commits returns the first-parent history of the branch, oldest first.
func (c *Copy) Commits() ([]string, error) {
	out, err := c.Git("rev-list", "--first-parent", "--reverse", "refs/heads/"+Branch)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// Files lists every file path on the tip.
func (c *Copy) Files() ([]string, error) {
	out, err := c.Git("ls-tree", "-r", "--name-only", "refs/heads/"+Branch)
	if err != nil {
		return nil, err
	}
	return strings.Split(out, "\n"), nil
}

// Find returns the file on the tip whose path contains every part.
func (c *Copy) Find(parts ...string) (string, error) {
	files, err := c.Files()
	if err != nil {
		return "", err
	}
	var found []string
	for _, f := range files {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(f, p)
		}
		if ok {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%d files match %q: %v", len(found), parts, found)
	}
	return found[0], nil
}

// Read returns the bytes of p at rev.
func (c *Copy) Read(rev, p string) ([]byte, error) {
	cmd := exec.Command("git", "cat-file", "blob", rev+":"+p)
	cmd.Dir = c.Dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git cat-file %s:%s: %w: %s", rev, p, err, errb.String())
	}
	return out.Bytes(), nil
}

// Landed returns the first commit of the first-parent history holding p.
func (c *Copy) Landed(p string) (string, error) {
	commits, err := c.Commits()
	if err != nil {
		return "", err
	}
	for _, h := range commits {
		if _, err := c.Git("cat-file", "-e", h+":"+p); err == nil {
			return h, nil
		}
	}
	return "", fmt.Errorf("%s is on no commit", p)
}

// Before returns the commit just before the one where the file Find(parts...)
// landed: the branch as it was without that file.
func (c *Copy) Before(parts ...string) (string, error) {
	p, err := c.Find(parts...)
	if err != nil {
		return "", err
	}
	landed, err := c.Landed(p)
	if err != nil {
		return "", err
	}
	return c.Git("rev-parse", landed+"^")
}

// commit writes a signed commit of parent's tree (or base's, when set)
// with changes applied (nil data deletes the path).
func (c *Copy) commit(base, parent string, changes map[string][]byte, msg string, env []string) (string, error) {
	index := filepath.Join(c.Dir, "tamper.index")
	defer os.Remove(index)
	genv := append([]string{"GIT_INDEX_FILE=" + index}, env...)
	if _, err := Git(c.Dir, genv, "read-tree", base); err != nil {
		return "", err
	}
	paths := make([]string, 0, len(changes))
	for p := range changes {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	// --index-info works without a work tree (a bare repository); mode 0
	// removes the path.
	var info bytes.Buffer
	for _, p := range paths {
		data := changes[p]
		if data == nil {
			fmt.Fprintf(&info, "0 %s\t%s\n", strings.Repeat("0", 40), p)
			continue
		}
		blob, err := c.hashObject(data)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&info, "100644 %s\t%s\n", blob, p)
	}
	cmd := exec.Command("git", "update-index", "--index-info")
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), genv...)
	cmd.Stdin = &info
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git update-index --index-info: %w: %s", err, out)
	}
	tree, err := Git(c.Dir, genv, "write-tree")
	if err != nil {
		return "", err
	}
	args := []string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + c.SSHKeyFile, "commit-tree", "-S", "-m", msg}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	return Git(c.Dir, env, append(args, tree)...)
}

func (c *Copy) hashObject(data []byte) (string, error) {
	cmd := exec.Command("git", "hash-object", "-w", "--stdin")
	cmd.Dir = c.Dir
	cmd.Stdin = bytes.NewReader(data)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git hash-object: %w: %s", err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// Append commits changes on top of the tip, signed by the reconciler's
// key, and moves the branch there (a fast-forward).
func (c *Copy) Append(changes map[string][]byte) (string, error) {
	tip, err := c.Tip()
	if err != nil {
		return "", err
	}
	h, err := c.commit(tip, tip, changes, "tamper: append\n", nil)
	if err != nil {
		return "", err
	}
	_, err = c.Git("update-ref", "refs/heads/"+Branch, h, tip)
	return h, err
}

// AppendDated is Append with the commit's author and committer times set
// to when (GIT_AUTHOR_DATE, GIT_COMMITTER_DATE): a commit whose time says
// what its signer chose, signed by the reconciler's key. Empty changes
// make a commit of the tip's tree.
func (c *Copy) AppendDated(when time.Time, changes map[string][]byte) (string, error) {
	tip, err := c.Tip()
	if err != nil {
		return "", err
	}
	date := when.UTC().Format(time.RFC3339)
	h, err := c.commit(tip, tip, changes, "tamper: append dated\n", []string{"GIT_AUTHOR_DATE=" + date, "GIT_COMMITTER_DATE=" + date})
	if err != nil {
		return "", err
	}
	_, err = c.Git("update-ref", "refs/heads/"+Branch, h, tip)
	return h, err
}

// CommitTime returns the committer time of commit h.
func (c *Copy) CommitTime(h string) (time.Time, error) {
	out, err := c.Git("log", "-1", "--format=%ct", h)
	if err != nil {
		return time.Time{}, err
	}
	sec, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("committer time of %s: %q: %w", h, out, err)
	}
	return time.Unix(sec, 0), nil
}

// Rewrite replays the branch from commit at (inclusive) to the tip with
// changes applied to every replayed tree, each commit re-signed by the
// reconciler's key with its message and dates kept, and force-moves the
// branch to the new tip: a rewritten history that is itself append-only.
func (c *Copy) Rewrite(at string, changes map[string][]byte) (string, error) {
	commits, err := c.Commits()
	if err != nil {
		return "", err
	}
	start := -1
	for i, h := range commits {
		if h == at {
			start = i
		}
	}
	if start < 0 {
		return "", fmt.Errorf("%s is not on the branch", at)
	}
	parent := ""
	if start > 0 {
		parent = commits[start-1]
	}
	for _, h := range commits[start:] {
		meta, err := c.Git("log", "-1", "--format=%aI%n%cI", h)
		if err != nil {
			return "", err
		}
		dates := strings.Split(meta, "\n")
		msg, err := c.Git("log", "-1", "--format=%B", h)
		if err != nil {
			return "", err
		}
		env := []string{"GIT_AUTHOR_DATE=" + dates[0], "GIT_COMMITTER_DATE=" + dates[1]}
		parent, err = c.commit(h, parent, changes, msg+"\n", env)
		if err != nil {
			return "", err
		}
	}
	_, err = c.Git("update-ref", "refs/heads/"+Branch, parent)
	return parent, err
}

// Resign decodes envelope, lets edit change its statement's predicate
// (a JSON object), and signs the result with key.
func Resign(envelope []byte, key *signing.PrivateKey, edit func(pred map[string]any)) ([]byte, error) {
	env, err := signing.ParseEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	st, err := env.Statement()
	if err != nil {
		return nil, err
	}
	if edit != nil {
		var pred map[string]any
		if err := json.Unmarshal(st.Predicate, &pred); err != nil {
			return nil, err
		}
		edit(pred)
		if st.Predicate, err = json.Marshal(pred); err != nil {
			return nil, err
		}
	}
	return signing.SignStatement(st, key)
}

// FlipSignature returns envelope with one bit of its first signature
// flipped: the same document with a forged signature.
func FlipSignature(envelope []byte) ([]byte, error) {
	var env signing.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, err
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		return nil, err
	}
	sig[len(sig)/2] ^= 0x01
	env.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
	out, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
