package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/internal/testing/gittest"
)

var day = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// testSigner returns a commit signing key and an allowed-signers file
// that trusts it for namespace "git".
func testSigner(t testing.TB) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	allowed := filepath.Join(t.TempDir(), "allowed_signers")
	line := `signet@example.invalid namespaces="git" ` + string(ssh.MarshalAuthorizedKey(signer.PublicKey()))
	require.NoError(t, os.WriteFile(allowed, []byte(line), 0o600))
	return signer, allowed
}

func testOptions(t testing.TB, url string, signer ssh.Signer) StoreOptions {
	return StoreOptions{
		URL:          url,
		CommitSigner: signer,
		Author:       "signet reconciler",
		Email:        "signet@example.invalid",
		StateDir:     t.TempDir(),
		Timeout:      time.Minute,
		// Tests open more than one store on a branch, as other writers.
		AcceptCurrentTip: true,
	}
}

func openStore(t testing.TB, opts StoreOptions) *Store {
	t.Helper()
	s, err := Open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// runFiles is one run's documents: the index entry and n documents.
func runFiles(cluster, run string, n, size int) []File {
	dir := RunDir(cluster, run, day)
	files := []File{IndexEntry(cluster, run, day)}
	for i := range n {
		line := []byte(fmt.Sprintf("%s doc %d\n", run, i))
		data := bytes.Repeat(line, size/len(line)+1)[:size]
		files = append(files, File{Path: fmt.Sprintf("%s/checks/%02d-check.json", dir, i), Data: data})
	}
	return files
}

// bareRemote is a bare repository on disk, reached by plain path.
func bareRemote(t testing.TB) string {
	dir := filepath.Join(t.TempDir(), "evidence.git")
	gittest.InitBare(t, dir)
	return dir
}

func TestLayout(t *testing.T) {
	admitted := time.Date(2026, 3, 4, 23, 30, 0, 0, time.FixedZone("x", -3*3600))
	assert.Equal(t, "runs/prod/2026/03/05/"+Shard("r1")+"/r1", RunDir("prod", "r1", admitted))
	assert.Equal(t, "ids/prod/"+Shard("r1")+"/r1", IndexPath("prod", "r1"))
	assert.Len(t, Shard("r1"), 2)
	f := IndexEntry("prod", "r1", admitted)
	assert.Equal(t, RunDir("prod", "r1", admitted)+"\n", string(f.Data))
}

func TestAppendCreateOnly(t *testing.T) {
	signer, _ := testSigner(t)
	first := []File{{Path: "runs/c/a/admission.json", Data: []byte("a")}, {Path: "ids/c/00/a", Data: []byte("x")}}
	tests := []struct {
		name  string
		files []File
	}{
		{name: "same path", files: []File{{Path: "runs/c/a/admission.json", Data: []byte("b")}}},
		{name: "same content", files: []File{{Path: "runs/c/a/admission.json", Data: []byte("a")}}},
		{name: "one existing among new", files: []File{
			{Path: "runs/c/a/evidence.json", Data: []byte("e")},
			{Path: "ids/c/00/a", Data: []byte("y")},
			{Path: "runs/c/b/admission.json", Data: []byte("b")},
		}},
		{name: "file where a directory is needed", files: []File{{Path: "ids/c/00/a/x", Data: []byte("x")}}},
		{name: "directory where a file is asked", files: []File{{Path: "runs/c/a", Data: []byte("x")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			remote := bareRemote(t)
			s := openStore(t, testOptions(t, remote, signer))
			tip, err := s.Append(t.Context(), "first", first)
			require.NoError(t, err)
			existed := map[string]bool{}
			for _, f := range tt.files {
				existed[f.Path], err = s.Exists(t.Context(), f.Path)
				require.NoError(t, err)
			}

			_, err = s.Append(t.Context(), "second", tt.files)
			require.ErrorIs(t, err, ErrExists)
			assert.Equal(t, tip, s.Tip())
			assert.Equal(t, tip, gittest.Git(t, remote, "rev-parse", "refs/heads/signet/evidence"))
			require.NoError(t, s.Refresh(t.Context()))
			for _, f := range tt.files {
				ok, err := s.Exists(t.Context(), f.Path)
				require.NoError(t, err)
				assert.Equal(t, existed[f.Path], ok, f.Path)
			}
			got, err := s.Read(t.Context(), "runs/c/a/admission.json")
			require.NoError(t, err)
			assert.Equal(t, "a", string(got))
		})
	}
}

func TestAppendInvalid(t *testing.T) {
	signer, _ := testSigner(t)
	s := openStore(t, testOptions(t, bareRemote(t), signer))
	for _, files := range [][]File{
		nil,
		{{Path: ""}},
		{{Path: "/abs"}},
		{{Path: "a/../b"}},
		{{Path: "a//b"}},
		{{Path: "a/"}},
		{{Path: "./a"}},
		{{Path: "a/.git/x"}},
		{{Path: "a/.GIT"}},
		{{Path: "a\nb"}},
		{{Path: "a\\b"}},
		{{Path: "a"}, {Path: "a"}},
		{{Path: "a"}, {Path: "a/b"}},
		{{Path: "a/b"}, {Path: "a"}},
	} {
		t.Run(fmt.Sprintf("%q", files), func(t *testing.T) {
			_, err := s.Append(t.Context(), "bad", files)
			require.ErrorIs(t, err, ErrInvalidPath)
			assert.Empty(t, s.Tip())
		})
	}
}

func TestAppendGroupCommitAndStockGit(t *testing.T) {
	signer, allowed := testSigner(t)
	remote := bareRemote(t)
	opts := testOptions(t, remote, signer)
	s := openStore(t, opts)
	var commits []string
	for i := range 3 {
		files := runFiles("prod", fmt.Sprintf("run-%d", i), 20, 2048)
		c, err := s.Append(t.Context(), fmt.Sprintf("run-%d: admission", i), files)
		require.NoError(t, err)
		commits = append(commits, c)

		// One commit holds exactly the files of the append, on the previous tip.
		changed := gittest.Git(t, remote, "diff-tree", "--no-commit-id", "--name-status", "-r", "--root", c)
		var want []string
		for _, f := range files {
			want = append(want, "A\t"+f.Path)
		}
		assert.ElementsMatch(t, want, strings.Split(changed, "\n"))
		if i > 0 {
			assert.Equal(t, commits[i-1], gittest.Git(t, remote, "rev-parse", c+"^"))
		}
		for _, f := range files {
			got, err := gittest.Cmd(t, remote, "cat-file", "blob", c+":"+f.Path).Output()
			require.NoError(t, err)
			assert.Equal(t, f.Data, got, f.Path)
		}
	}
	assert.Equal(t, commits[2], gittest.Git(t, remote, "rev-parse", "signet/evidence"))
	assert.Equal(t, "3", gittest.Git(t, remote, "rev-list", "--count", "signet/evidence"))

	require.NoError(t, s.Close()) // flushes the mirror
	assert.Equal(t, commits[2], gittest.Git(t, filepath.Join(opts.StateDir, mirrorDir), "rev-parse", "signet/evidence"))
	for _, repo := range []string{remote, filepath.Join(opts.StateDir, mirrorDir)} {
		out, err := gittest.Run(t, repo, nil, "fsck", "--strict", "--no-dangling", "--no-progress")
		require.NoError(t, err, "git fsck --strict in %s", repo)
		assert.Empty(t, out)
	}
	for _, c := range commits {
		out, err := gittest.Run(t, remote, nil, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed,
			"verify-commit", "--raw", c)
		require.NoError(t, err, "git verify-commit %s", c)
		_ = out
	}

	// Another key is not accepted: the check is real.
	_, other := testSigner(t)
	_, err := gittest.Run(t, remote, nil, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+other, "verify-commit", commits[0])
	require.Error(t, err)
}

func TestReadReadDirExists(t *testing.T) {
	signer, _ := testSigner(t)
	s := openStore(t, testOptions(t, bareRemote(t), signer))
	_, err := s.Read(t.Context(), "a")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.ReadDir(t.Context(), "")
	require.ErrorIs(t, err, ErrNotFound)

	_, err = s.Append(t.Context(), "m", []File{{Path: "d/b", Data: []byte("B")}, {Path: "d/a/x", Data: []byte("X")}, {Path: "top", Data: nil}})
	require.NoError(t, err)

	tests := []struct {
		path    string
		read    string
		readErr error
		dir     []string
		dirErr  error
		exists  bool
	}{
		{path: "d/b", read: "B", dirErr: ErrNotFound, exists: true},
		{path: "d/a/x", read: "X", dirErr: ErrNotFound, exists: true},
		{path: "top", read: "", dirErr: ErrNotFound, exists: true},
		{path: "d", readErr: ErrNotFound, dir: []string{"a", "b"}, exists: true},
		{path: ".", readErr: ErrInvalidPath, dir: []string{"d", "top"}, exists: false},
		{path: "d/c", readErr: ErrNotFound, dirErr: ErrNotFound},
		{path: "d/b/z", readErr: ErrNotFound, dirErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := s.Read(t.Context(), tt.path)
			if tt.readErr != nil {
				require.ErrorIs(t, err, tt.readErr)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.read, string(got))
			}
			names, err := s.ReadDir(t.Context(), tt.path)
			if tt.dirErr != nil {
				require.ErrorIs(t, err, tt.dirErr)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.dir, names)
			}
			ok, err := s.Exists(t.Context(), tt.path)
			if errors.Is(err, ErrInvalidPath) {
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.exists, ok)
		})
	}
}

func TestRemoteKinds(t *testing.T) {
	signer, _ := testSigner(t)
	const token = "tok-9f8e7d6c5b4a"
	const password = "pw-0a1b2c3d4e5f"
	tests := []struct {
		name    string
		url     func(t *testing.T) string
		auth    Auth
		wantErr error
	}{
		{name: "plain path", url: func(t *testing.T) string { return bareRemote(t) }},
		{name: "relative path", url: func(t *testing.T) string {
			dir := bareRemote(t)
			wd, err := os.Getwd()
			require.NoError(t, err)
			rel, err := filepath.Rel(wd, dir)
			require.NoError(t, err)
			return rel
		}},
		{name: "file url", url: func(t *testing.T) string { return "file://" + bareRemote(t) }},
		{name: "http open", url: httpRepo(gittest.Auth{})},
		{name: "http bearer token", url: httpRepo(gittest.Auth{Token: token}), auth: Auth{Token: token}},
		{name: "http token as basic password", url: httpRepo(gittest.Auth{Token: token}), auth: Auth{Username: "x-access-token", Token: token}},
		{name: "http basic", url: httpRepo(gittest.Auth{Username: "alice", Password: password}), auth: Auth{Username: "alice", Password: password}},
		{name: "http basic in URL", url: func(t *testing.T) string {
			return strings.Replace(httpRepo(gittest.Auth{Username: "alice", Password: password})(t), "http://", "http://alice:"+password+"@", 1)
		}},
		{name: "http wrong token", url: httpRepo(gittest.Auth{Token: token}), auth: Auth{Token: "wrong-" + token}, wantErr: ErrAuth},
		{name: "http no token", url: httpRepo(gittest.Auth{Token: token}), wantErr: ErrAuth},
		{name: "http wrong password in URL", url: func(t *testing.T) string {
			return strings.Replace(httpRepo(gittest.Auth{Username: "alice", Password: "other"})(t), "http://", "http://alice:"+password+"@", 1)
		}, wantErr: ErrAuth},
		{name: "http nobody listening", url: func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			addr := l.Addr().String()
			l.Close()
			return "http://alice:" + password + "@" + addr + "/r.git"
		}, auth: Auth{Token: token}, wantErr: ErrUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions(t, tt.url(t), signer)
			opts.Auth = tt.auth
			s, err := Open(t.Context(), opts)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.NotContains(t, err.Error(), token)
				assert.NotContains(t, err.Error(), password)
				return
			}
			require.NoError(t, err)
			defer s.Close()
			c, err := s.Append(t.Context(), "m", runFiles("c", "r", 2, 100))
			require.NoError(t, err)
			assert.Equal(t, c, s.Tip())
			// A second store sees it.
			opts2 := opts
			opts2.StateDir = t.TempDir()
			s2 := openStore(t, opts2)
			assert.Equal(t, c, s2.Tip())
			got, err := s2.Read(t.Context(), IndexPath("c", "r"))
			require.NoError(t, err)
			assert.Equal(t, RunDir("c", "r", day)+"\n", string(got))
		})
	}
}

// httpRepo returns a function creating a repository on a new smart-HTTP
// server that demands auth.
func httpRepo(auth gittest.Auth) func(t *testing.T) string {
	return func(t *testing.T) string {
		url, _ := gittest.NewHTTPServer(t, gittest.WithAuth(auth)).NewRepo("evidence")
		return url
	}
}

func TestCredentialsNeverPrinted(t *testing.T) {
	signer, _ := testSigner(t)
	a := Auth{Token: "tok-secret-1", Username: "u", Password: "pw-secret-2", SSHSigner: signer}
	opts := StoreOptions{URL: "https://u:pw-secret-3@example.invalid/r.git", Auth: a}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "auth", a, "opts", opts.Auth)
	for _, out := range []string{
		fmt.Sprint(a), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", a), fmt.Sprintf("%v", opts), fmt.Sprintf("%+v", &opts), logged.String(),
	} {
		assert.NotContains(t, out, "tok-secret-1")
		assert.NotContains(t, out, "pw-secret-2")
	}
	_, err := Open(t.Context(), StoreOptions{URL: "ftp://u:pw-secret-3@example.invalid/r.git", CommitSigner: signer,
		Author: "a", Email: "a@b", StateDir: t.TempDir()})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "pw-secret-3")
}

func TestRestartKeepsTip(t *testing.T) {
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	opts := testOptions(t, remote, signer)
	s, err := Open(t.Context(), opts)
	require.NoError(t, err)
	c, err := s.Append(t.Context(), "m", runFiles("c", "r1", 2, 10))
	require.NoError(t, err)

	// One store at a time per StateDir.
	_, err = Open(t.Context(), opts)
	require.ErrorContains(t, err, "in use")
	require.NoError(t, s.Close())

	// A restarted store over the same StateDir knows its tip even before
	// the remote is reachable again.
	b, err := os.ReadFile(filepath.Join(opts.StateDir, stateFile))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"pushed": "`+c+`"`)
	s = openStore(t, opts)
	assert.Equal(t, c, s.Tip())
	assert.Equal(t, c, s.pushed.String())

	// A crash before the mirror was flushed: the remembered tip is not in
	// the mirror; the fetch at Open brings it back.
	c2, err := s.Append(t.Context(), "m", runFiles("c", "r2", 2, 10))
	require.NoError(t, err)
	s.overlay = newOverlay() // lost with the process
	s.objs.top = s.overlay
	require.NoError(t, s.Close())
	s = openStore(t, opts)
	assert.Equal(t, c2, s.Tip())
	got, err := s.Read(t.Context(), IndexPath("c", "r2"))
	require.NoError(t, err)
	assert.Equal(t, RunDir("c", "r2", day)+"\n", string(got))

	// Another remote over the same StateDir is refused.
	other := opts
	other.URL = bareRemote(t)
	require.NoError(t, s.Close())
	_, err = Open(t.Context(), other)
	require.ErrorContains(t, err, "remembers")
}

func TestRolledBack(t *testing.T) {
	signer, _ := testSigner(t)
	tests := []struct {
		name   string
		rewind func(t *testing.T, work string)
	}{
		{name: "older tip", rewind: func(t *testing.T, work string) {
			gittest.Git(t, work, "reset", "--quiet", "--hard", "HEAD~1")
		}},
		{name: "rewritten history", rewind: func(t *testing.T, work string) {
			gittest.Git(t, work, "commit", "--quiet", "--amend", "-m", "rewritten")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := gittest.NewHTTPServer(t)
			url, dir := srv.NewRepo("evidence")
			opts := testOptions(t, url, signer)
			s, err := Open(t.Context(), opts)
			require.NoError(t, err)
			_, err = s.Append(t.Context(), "1", runFiles("c", "r1", 1, 10))
			require.NoError(t, err)
			pushed, err := s.Append(t.Context(), "2", runFiles("c", "r2", 1, 10))
			require.NoError(t, err)

			// Someone force-pushes with stock git (after lifting the
			// server's guard, as an admin would).
			work := filepath.Join(t.TempDir(), "w")
			gittest.Git(t, "", "clone", "--quiet", "--branch", "signet/evidence", url, work)
			tt.rewind(t, work)
			gittest.Git(t, dir, "config", "receive.denyNonFastForwards", "false")
			gittest.Git(t, work, "push", "--quiet", "--force", "origin", "HEAD:signet/evidence")
			gittest.Git(t, dir, "config", "receive.denyNonFastForwards", "true")

			require.ErrorIs(t, s.Refresh(t.Context()), ErrRolledBack)
			assert.Equal(t, pushed, s.Tip())
			_, err = s.Append(t.Context(), "3", runFiles("c", "r3", 1, 10))
			require.ErrorIs(t, err, ErrRolledBack)
			assert.Equal(t, gittest.Git(t, work, "rev-parse", "HEAD"), gittest.Git(t, dir, "rev-parse", "signet/evidence"), "nothing pushed")

			require.NoError(t, s.Close())
			_, err = Open(t.Context(), opts)
			require.ErrorIs(t, err, ErrRolledBack, "a restarted store remembers the tip")
		})
	}
}

// TestConcurrentWriters: several stores append to one remote at once,
// over the smart-HTTP server (receive-pack) and to a local bare
// repository (written in process under git's ref lock): nothing is lost
// or duplicated, and exactly one of several writers racing for one run
// directory wins.
func TestConcurrentWriters(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		srv := gittest.NewHTTPServer(t, gittest.WithAuth(gittest.Auth{Token: "t0k"}))
		url, dir := srv.NewRepo("evidence")
		testConcurrentWriters(t, url, dir, Auth{Token: "t0k"}, 2)
	})
	t.Run("local", func(t *testing.T) {
		dir := bareRemote(t)
		testConcurrentWriters(t, dir, dir, Auth{}, 4)
	})
}

func testConcurrentWriters(t *testing.T, url, dir string, auth Auth, writers int) {
	signer, allowed := testSigner(t)
	const appends = 6
	stores := make([]*Store, writers)
	for i := range stores {
		opts := testOptions(t, url, signer)
		opts.Auth = auth
		stores[i] = openStore(t, opts)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*appends)
	for w, s := range stores {
		wg.Go(func() {
			for i := range appends {
				if _, err := s.Append(t.Context(), "m", runFiles("c", fmt.Sprintf("w%d-r%d", w, i), 3, 64)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Every writer races for the same run directory: exactly one wins.
	var won, lost int
	var mu sync.Mutex
	for _, s := range stores {
		wg.Go(func() {
			_, err := s.Append(t.Context(), "same", runFiles("c", "contended", 2, 64))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrExists):
				lost++
			default:
				t.Errorf("unexpected: %v", err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 1, won)
	assert.Equal(t, writers-1, lost)

	// Nothing lost, nothing duplicated: one commit per successful append,
	// every file present once, linear history, stock git happy.
	assert.Equal(t, fmt.Sprint(writers*appends+1), gittest.Git(t, dir, "rev-list", "--count", "signet/evidence"))
	assert.Equal(t, "0", gittest.Git(t, dir, "rev-list", "--count", "--merges", "signet/evidence"))
	files := strings.Split(gittest.Git(t, dir, "ls-tree", "-r", "--name-only", "signet/evidence"), "\n")
	assert.Len(t, files, writers*appends*4+3)
	for w := range writers {
		for i := range appends {
			assert.Contains(t, files, IndexPath("c", fmt.Sprintf("w%d-r%d", w, i)))
		}
	}
	_, err := gittest.Run(t, dir, nil, "fsck", "--strict", "--no-dangling")
	require.NoError(t, err)
	for _, c := range strings.Split(gittest.Git(t, dir, "rev-list", "signet/evidence"), "\n") {
		_, err := gittest.Run(t, dir, nil, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", c)
		require.NoError(t, err, c)
	}
	for _, s := range stores {
		require.NoError(t, s.Refresh(t.Context()))
		assert.Equal(t, gittest.Git(t, dir, "rev-parse", "signet/evidence"), s.Tip())
	}
}

func TestRejectedIsNotARace(t *testing.T) {
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	s := openStore(t, testOptions(t, remote, signer))
	_, err := s.Append(t.Context(), "1", runFiles("c", "r1", 1, 10))
	require.NoError(t, err)
	hook := filepath.Join(remote, "hooks", "pre-receive")
	require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\necho refused by policy >&2\nexit 1\n"), 0o755))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = s.Append(ctx, "2", runFiles("c", "r2", 1, 10))
	require.ErrorIs(t, err, ErrRejected)
	assert.NotErrorIs(t, err, ErrExists)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)

	// The state file, staged while the push ran, was not put in place: the
	// remembered tip is still the one that landed, and a new store on the
	// same state starts from it (no rollback alarm, no tip never pushed).
	opts := s.opts
	st, err := os.ReadFile(filepath.Join(opts.StateDir, stateFile))
	require.NoError(t, err)
	assert.Contains(t, string(st), s.Tip(), "a tip that never landed was remembered")
	leftovers, err := filepath.Glob(filepath.Join(opts.StateDir, "."+stateFile+".tmp-*"))
	require.NoError(t, err)
	assert.Empty(t, leftovers, "a staged state file was left behind")
	require.NoError(t, s.Close())
	s2, err := Open(t.Context(), opts)
	require.NoError(t, err, "a tip that never landed was remembered")
	defer s2.Close()
	assert.Equal(t, s.Tip(), s2.Tip())
}

// TestStoreID: the ID names the branch, not the remote, is the same for
// every store of one branch and differs for another branch or remote.
func TestStoreID(t *testing.T) {
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	a := openStore(t, testOptions(t, remote, signer))
	b := openStore(t, testOptions(t, remote, signer))
	opts := testOptions(t, remote, signer)
	opts.Branch = "evidence-staging"
	c := openStore(t, opts)
	d := openStore(t, testOptions(t, bareRemote(t), signer))
	require.Regexp(t, `^`+DefaultBranch+`@[0-9a-f]{12}$`, a.ID())
	assert.NotContains(t, a.ID(), remote)
	assert.Equal(t, a.ID(), b.ID())
	assert.NotEqual(t, a.ID(), c.ID(), "another branch")
	assert.NotEqual(t, a.ID(), d.ID(), "another remote")
}
