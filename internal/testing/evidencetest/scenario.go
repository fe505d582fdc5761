package evidencetest

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/corpus"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// RunCorpus runs every scenario of the corpus directory dir (its
// manifest.json) with RunScenario and requires the reason the manifest
// names for it, one of reasons (the package's named outcomes); then that
// every reason is reached, or owned up to in dir/uncovered.json.
func RunCorpus(t *testing.T, dir string, reasons []corpus.Reason) {
	entries, err := corpus.Load(dir)
	require.NoError(t, err)
	for _, e := range entries {
		t.Run(e.Input, func(t *testing.T) {
			msgs := RunScenario(t, dir, filepath.Join(dir, e.Input))
			r, ok := corpus.Find(reasons, e.Reason)
			require.True(t, ok, "the manifest names %q, which the package source no longer states", e.Reason)
			assert.True(t, r.Matches(msgs), "want reason %q (%s); got:\n%s", r.ID, r.Where, strings.Join(msgs, "\n"))
		})
	}
	t.Run("coverage", func(t *testing.T) { corpus.RequireCovered(t, dir, reasons, entries) })
}

// RunScenario runs the .scenario input file of the corpus directory dir
// (which holds the keys and trust policy its steps name): a list of steps
// against a real bare repository (and, for "remote", a real Git HTTP
// server), with stock git for what signet itself would never do. Lines:
//
//	remote token|closed     serve the repository over HTTP with a token and
//	                        open the store with a wrong one | use a closed port
//	append PATH...          Store.Append of files holding their own path
//	read PATH               Store.Read
//	refresh                 Store.Refresh
//	open-unanchored         open a store that accepts no unremembered,
//	                        unpinned tip (every other step's store accepts
//	                        the branch's current tip, as a second writer)
//	keeper                  open the store with a MemoryKeeper of the tip
//	keep NAME               another writer keeps pin NAME in that keeper
//	hook-reject             install a pre-receive hook that refuses every push
//	git-add PATH [TEXT]     an unsigned commit adding or changing PATH (stock git)
//	git-rm PATH             an unsigned commit deleting PATH
//	git-merge PATH          a merge commit whose side branch adds PATH
//	pin NAME                remember the branch tip as NAME
//	git-reset NAME          point the branch at NAME (stock git update-ref)
//	sign KEY PATH PRED JSON an unsigned commit adding PATH: a DSSE envelope of
//	                        an in-toto statement of predicate type
//	                        https://signet.dev/PRED/v1 and predicate JSON, signed
//	                        by DIR/KEY.key (test-only keys: "evidence"
//	                        is the trust policy's evidence signer, "approver" an
//	                        approver)
//	audit [since=NAME]      audit.Branch under DIR/trust.yaml
//	verify RUN              audit.Verify of RUN
//
// It returns the text of every error and audit finding, in order.
func RunScenario(t *testing.T, dir, file string) []string {
	t.Helper()
	s := &scenario{t: t, dir: dir, bare: filepath.Join(t.TempDir(), "evidence.git"), work: t.TempDir(), pins: map[string]string{}}
	gittest.InitBare(t, s.bare)
	s.url = s.bare
	gittest.Git(t, s.work, "init", "-q", "-b", "w")
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		args := strings.Fields(line)
		s.step(args[0], args[1:])
	}
	require.NoError(t, sc.Err())
	if s.store != nil {
		_ = s.store.Close()
	}
	return s.msgs
}

// scenario is one RunScenario run.
type scenario struct {
	t      *testing.T
	dir    string
	bare   string
	work   string
	url    string
	auth   evidence.Auth
	store  *evidence.Store
	pins   map[string]string
	keeper *MemoryKeeper
	policy *signing.TrustPolicy
	msgs   []string
}

// trust returns the corpus's trust policy, DIR/trust.yaml.
func (s *scenario) trust() *signing.TrustPolicy {
	if s.policy == nil {
		var err error
		s.policy, err = signing.LoadTrustPolicy(filepath.Join(s.dir, "trust.yaml"))
		require.NoError(s.t, err)
	}
	return s.policy
}

func (s *scenario) fail(err error) {
	if err != nil {
		s.msgs = append(s.msgs, err.Error())
	}
}

func (s *scenario) open() *evidence.Store {
	if s.store != nil {
		return s.store
	}
	st, err := s.openWith(true)
	s.fail(err)
	s.store = st
	return st
}

// openWith opens a store over a fresh StateDir, with the scenario's
// keeper if any; accept trusts the branch's current tip.
func (s *scenario) openWith(accept bool) (*evidence.Store, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(s.t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(s.t, err)
	opts := evidence.StoreOptions{
		URL: s.url, Auth: s.auth, CommitSigner: signer, Author: "corpus", Email: "corpus@example.invalid",
		StateDir: s.t.TempDir(), Timeout: 20 * time.Second, AcceptCurrentTip: accept,
	}
	if s.keeper != nil {
		opts.Keeper = s.keeper
	}
	return evidence.Open(s.t.Context(), opts)
}

func (s *scenario) git(args ...string) string { return gittest.Git(s.t, s.work, args...) }

// checkout makes the work tree the branch's tip (or an empty branch).
func (s *scenario) checkout() {
	if _, err := gittest.Run(s.t, s.work, nil, "fetch", "-q", s.bare, "+refs/heads/"+evidence.DefaultBranch+":refs/remotes/b/tip"); err != nil {
		s.git("checkout", "-q", "--orphan", fmt.Sprintf("empty-%d", time.Now().UnixNano()))
		_, _ = gittest.Run(s.t, s.work, nil, "rm", "-rq", "--cached", "--ignore-unmatch", ".")
		return
	}
	s.git("checkout", "-q", "-f", "-B", "w", "refs/remotes/b/tip")
}

func (s *scenario) commitAndPush(msg string) {
	s.git("-c", "user.name=corpus", "-c", "user.email=corpus@example.invalid", "commit", "-q", "--allow-empty", "-m", msg)
	gittest.Git(s.t, s.work, "push", "-q", "-f", s.bare, "HEAD:refs/heads/"+evidence.DefaultBranch)
}

func (s *scenario) write(p, text string) {
	full := filepath.Join(s.work, filepath.FromSlash(p))
	require.NoError(s.t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(s.t, os.WriteFile(full, []byte(text), 0o644))
	s.git("add", p)
}

func (s *scenario) step(op string, args []string) {
	t := s.t
	ctx := t.Context()
	switch op {
	case "remote":
		require.Len(t, args, 1)
		switch args[0] {
		case "token":
			srv := gittest.NewHTTPServer(t, gittest.WithAuth(gittest.Auth{Token: "right-token"}))
			var dir string
			s.url, dir = srv.NewRepo("evidence")
			s.bare = dir
			s.auth = evidence.Auth{Token: "wrong-token"}
		case "closed":
			s.url = "http://127.0.0.1:1/evidence.git"
		default:
			t.Fatalf("remote %q", args[0])
		}
	case "append":
		st := s.open()
		if st == nil {
			return
		}
		var files []evidence.File
		for _, p := range args {
			files = append(files, evidence.File{Path: p, Data: []byte(p + "\n")})
		}
		_, err := st.Append(ctx, "", files)
		s.fail(err)
	case "append-at":
		// append-at PIN PATH...: AppendAt on the tip pinned as PIN.
		st := s.open()
		if st == nil {
			return
		}
		var files []evidence.File
		for _, p := range args[1:] {
			files = append(files, evidence.File{Path: p, Data: []byte(p + "\n")})
		}
		_, err := st.AppendAt(ctx, "", s.pins[args[0]], files)
		s.fail(err)
	case "read":
		if st := s.open(); st != nil {
			_, err := st.Read(ctx, args[0])
			s.fail(err)
		}
	case "refresh":
		if st := s.open(); st != nil {
			s.fail(st.Refresh(ctx))
		}
	case "open-unanchored":
		st, err := s.openWith(false)
		s.fail(err)
		if st != nil {
			_ = st.Close()
		}
	case "keeper":
		s.keeper = &MemoryKeeper{}
	case "keep":
		s.keeper.Set(s.pins[args[0]])
	case "hook-reject":
		hook := filepath.Join(s.bare, "hooks", "pre-receive")
		require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\necho refused by policy >&2\nexit 1\n"), 0o755))
	case "git-add":
		s.checkout()
		text := args[0] + "\n"
		if len(args) > 1 {
			text = strings.Join(args[1:], " ") + "\n"
		}
		s.write(args[0], text)
		s.commitAndPush("add " + args[0])
	case "git-rm":
		s.checkout()
		s.git("rm", "-q", args[0])
		s.commitAndPush("remove " + args[0])
	case "git-merge":
		s.checkout()
		s.git("checkout", "-q", "-B", "side")
		s.write(args[0], args[0]+"\n")
		s.git("-c", "user.name=corpus", "-c", "user.email=corpus@example.invalid", "commit", "-q", "-m", "side")
		s.git("checkout", "-q", "-B", "w", "refs/remotes/b/tip")
		s.git("-c", "user.name=corpus", "-c", "user.email=corpus@example.invalid", "merge", "-q", "--no-ff", "-m", "merge", "side")
		gittest.Git(t, s.work, "push", "-q", "-f", s.bare, "HEAD:refs/heads/"+evidence.DefaultBranch)
	case "sign":
		require.GreaterOrEqual(t, len(args), 4, "sign KEY PATH PRED JSON")
		key, err := signing.LoadPrivateKey(filepath.Join(s.dir, args[0]+".key"), nil)
		require.NoError(t, err)
		st, err := signing.NewStatement("https://signet.dev/"+args[2]+"/v1",
			[]signing.Subject{signing.SubjectFor("corpus", specs.DigestOf([]byte("corpus")))},
			json.RawMessage(strings.Join(args[3:], " ")))
		require.NoError(t, err)
		env, err := signing.SignStatement(st, key)
		require.NoError(t, err)
		s.checkout()
		s.write(args[1], string(env))
		s.commitAndPush("sign " + args[1])
	case "pin":
		s.pins[args[0]] = gittest.Git(t, s.bare, "rev-parse", "refs/heads/"+evidence.DefaultBranch)
	case "git-reset":
		gittest.Git(t, s.bare, "update-ref", "refs/heads/"+evidence.DefaultBranch, s.pins[args[0]])
	case "audit":
		opts := audit.Options{Repo: s.bare, Policy: s.trust(), Now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "since="); ok {
				opts.Since = s.pins[v]
			}
		}
		rep, err := audit.Branch(ctx, opts)
		s.fail(err)
		if rep != nil {
			for _, f := range rep.Findings {
				s.msgs = append(s.msgs, f.String())
			}
		}
	case "verify":
		_, err := audit.Verify(ctx, audit.VerifyOptions{Repo: s.bare, Run: args[0], Policy: s.trust()})
		s.fail(err)
	default:
		t.Fatalf("unknown scenario step %q", op)
	}
}
