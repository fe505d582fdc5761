// Package testenv builds what signet's end-to-end tests share: the signet
// binary (built once per test process), keys and a trust policy, real Git
// spec repositories made with the stock git CLI holding a local profile and
// its scripts, approvals written by `signet sign`, and readers of the
// evidence branch through stock git. It never fakes Git or the signet CLI.
package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// Signet returns the path of the signet binary, built from this module's
// working tree once per test process. The binary lives at one stable path
// per module checkout in the system temporary directory, replaced
// atomically (rename) by each build, so that concurrent test processes
// never see a partial file and nothing accumulates.
func Signet(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(os.TempDir(), "signet-testenv-"+hex.EncodeToString(sum[:6]))
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		tmp, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			buildErr = err
			return
		}
		defer os.RemoveAll(tmp)
		// Without the symbol table and DWARF (-s -w) the link takes about
		// half the time; stack traces keep their function names.
		cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", filepath.Join(tmp, "signet"), "./cmd/signet")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/signet: %w\n%s", err, out)
			return
		}
		buildBin = filepath.Join(dir, "signet")
		buildErr = os.Rename(filepath.Join(tmp, "signet"), buildBin)
	})
	require.NoError(t, buildErr)
	return buildBin
}

// Cleanup is kept for TestMain functions; the binary stays at its stable
// path for the next test process.
func Cleanup() {}

// WorldDir returns a fresh directory that every user may write to (mode
// 1777, in the system temporary directory), removed when the test ends:
// check scripts running as an unprivileged user leave their side effects
// there.
func WorldDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "signet-world-")
	require.NoError(t, err)
	// Sticky, as /tmp is: a work root under it passes signet's checks.
	require.NoError(t, os.Chmod(d, os.ModeSticky|0o777))
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// Keys are an approver key, a second approver key and the reconciler's
// key, written as PEM files, and the trust policy file that trusts them.
type Keys struct {
	Dir                    string
	Approver, Approver2    *signing.PrivateKey
	Reconciler             *signing.PrivateKey
	ApproverFile           string
	Approver2File          string
	ReconcilerFile         string
	TrustFile              string
	approverIDs, signerIDs []string
}

// NewKeys generates the keys and writes a trust policy in which both
// approvers may approve (threshold 1) and the reconciler signs evidence.
func NewKeys(t testing.TB) *Keys {
	t.Helper()
	k := &Keys{Dir: t.TempDir()}
	var err error
	k.Approver, err = signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(t, err)
	k.Approver2, err = signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(t, err)
	k.Reconciler, err = signing.GenerateKey("ed25519")
	require.NoError(t, err)
	write := func(name string, key *signing.PrivateKey) string {
		b, err := key.MarshalPEM(nil)
		require.NoError(t, err)
		p := filepath.Join(k.Dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	k.ApproverFile = write("approver.key", k.Approver)
	k.Approver2File = write("approver2.key", k.Approver2)
	k.ReconcilerFile = write("reconciler.key", k.Reconciler)
	k.TrustFile = filepath.Join(k.Dir, "trust.yaml")
	k.WriteTrust(t, k.Approver, k.Approver2)
	return k
}

// WriteTrust rewrites the trust policy so that exactly approvers may
// approve; the reconciler's key always signs evidence.
func (k *Keys) WriteTrust(t testing.TB, approvers ...*signing.PrivateKey) {
	t.Helper()
	spec := signing.TrustPolicySpec{
		Keys:            []signing.TrustedKeySpec{signing.KeySpec(k.Reconciler.Public())},
		EvidenceSigners: []string{k.Reconciler.KeyID()},
		Thresholds:      signing.Thresholds{CertificationProfile: new(1), CertificationRequest: new(1), Cancel: new(1), Release: new(1)},
	}
	for _, a := range approvers {
		spec.Keys = append(spec.Keys, signing.KeySpec(a.Public()))
		spec.Approvers = append(spec.Approvers, a.KeyID())
	}
	doc := map[string]any{
		"apiVersion": specs.APIVersion, "kind": signing.TrustPolicyKind,
		"metadata": map[string]string{"name": "test"}, "spec": spec,
	}
	b, err := yaml.Marshal(doc)
	require.NoError(t, err)
	tmp := k.TrustFile + ".tmp"
	require.NoError(t, os.WriteFile(tmp, b, 0o600))
	require.NoError(t, os.Rename(tmp, k.TrustFile))
	_, err = signing.LoadTrustPolicy(k.TrustFile)
	require.NoError(t, err, "trust policy:\n%s", b)
}

// Check is one check of a generated profile.
type Check struct {
	Name     string
	Script   string // body after the shared prelude (see Prelude)
	Deadline int    // seconds; 10 when zero
	Stage    string
	Backend  string // "local" when empty
	Workload string // spec.checks[].workload as one line of flow YAML
	GPUCount int    // spec.checks[].gpuCount; omitted when zero
	Raw      bool   // Script is the whole file, without the prelude
}

// Prelude is prepended to every generated script: it records one side
// effect line "<run> <check>" in $SIDE/effects (SIDE is the world-writable
// side-effect directory) and defines result VERDICT, which writes a result
// with the run, check and nonce of the environment unless RUN, CHECK or
// NONCE override them, and SUMMARY as its summary.
const Prelude = `set -u
echo "$SIGNET_RUN_ID $SIGNET_CHECK_NAME" >> "$SIDE/effects"
result() { printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"%s","summary":"%s"}' "${RUN:-$SIGNET_RUN_ID}" "${CHECK:-$SIGNET_CHECK_NAME}" "${NONCE:-$SIGNET_NONCE}" "$1" "${SUMMARY:-ok}" > "$SIGNET_RESULT_FILE"; }
`

// Script returns the full script text of body with the prelude, SIDE set
// to side.
func Script(side, body string) string {
	return "#!/bin/sh\nSIDE=" + side + "\n" + Prelude + body + "\n"
}

// Repo is a spec repository on disk, a real Git repository on branch main.
type Repo struct {
	Dir  string
	Side string // world-writable side-effect directory of its scripts
	t    testing.TB
}

// NewRepo creates an empty spec repository with a first commit.
func NewRepo(t testing.TB) *Repo {
	t.Helper()
	r := &Repo{Dir: t.TempDir(), Side: WorldDir(t), t: t}
	// Every check runs as a transient uid of its own (when the test runs
	// as root): the effects file is made here, writable by all of them.
	effects := filepath.Join(r.Side, "effects")
	require.NoError(t, os.WriteFile(effects, nil, 0o666))
	require.NoError(t, os.Chmod(effects, 0o666))
	gittest.Git(t, r.Dir, "init", "-q", "-b", "main")
	r.WriteFile("README.md", "spec repository of a test\n")
	r.Commit("init")
	return r
}

// WriteFile writes a file of the working tree (not committed).
func (r *Repo) WriteFile(name, content string) {
	r.t.Helper()
	p := filepath.Join(r.Dir, filepath.FromSlash(name))
	require.NoError(r.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(r.t, os.WriteFile(p, []byte(content), 0o644))
}

// Commit commits every change of the working tree and returns the commit.
func (r *Repo) Commit(msg string) string {
	r.t.Helper()
	gittest.Git(r.t, r.Dir, "add", "-A")
	gittest.Git(r.t, r.Dir, "-c", "user.name=test", "-c", "user.email=test@signet.invalid", "commit", "-q", "--allow-empty", "-m", msg)
	return gittest.Git(r.t, r.Dir, "rev-parse", "HEAD")
}

// AddProfile writes a profile named name with checks, its bundle of
// scripts under bundles/<name>, and pins the bundle digest computed with
// specs.BundleDigest. onFailure is "" (continue) or "stop".
func (r *Repo) AddProfile(name, onFailure string, checks ...Check) {
	r.t.Helper()
	r.AddProfileFor(name, 1, onFailure, checks...)
}

// AddProfileFor is AddProfile with participants.min = participants.max =
// participants.
func (r *Repo) AddProfileFor(name string, participants int, onFailure string, checks ...Check) {
	r.t.Helper()
	bundle := "bundles/" + name
	var b strings.Builder
	for _, c := range checks {
		text := Script(r.Side, c.Script)
		if c.Raw {
			text = c.Script
		}
		r.WriteFile(path.Join(bundle, c.Name+".sh"), text)
	}
	d, _, err := specs.BundleDigest(os.DirFS(r.Dir), bundle)
	require.NoError(r.t, err)
	fmt.Fprintf(&b, "apiVersion: %s\nkind: CertificationProfile\nmetadata:\n  name: %s\nspec:\n", specs.APIVersion, name)
	fmt.Fprintf(&b, "  bundle:\n    path: %s\n    digest: %s\n", bundle, d)
	fmt.Fprintf(&b, "  participants:\n    min: %d\n    max: %d\n", participants, participants)
	if onFailure != "" {
		fmt.Fprintf(&b, "  onFailure: %s\n", onFailure)
	}
	b.WriteString("  checks:\n")
	for _, c := range checks {
		be := c.Backend
		if be == "" {
			be = "local"
		}
		dl := c.Deadline
		if dl == 0 {
			dl = 10
		}
		fmt.Fprintf(&b, "  - name: %s\n    script: %s.sh\n    backend: %s\n    deadline: %ds\n", c.Name, c.Name, be, dl)
		if c.Stage != "" {
			fmt.Fprintf(&b, "    stage: %s\n", c.Stage)
		}
		if c.GPUCount != 0 {
			fmt.Fprintf(&b, "    gpuCount: %d\n", c.GPUCount)
		}
		if c.Workload != "" {
			fmt.Fprintf(&b, "    workload: %s\n", c.Workload)
		}
	}
	r.WriteFile("profiles/"+name+".yaml", b.String())
}

// AddRequest writes a request named name of profile for localhost, with
// extra lines appended to its spec (e.g. "cancel: true").
func (r *Repo) AddRequest(name, profile string, extra ...string) {
	r.t.Helper()
	r.AddRequestFor(name, profile, []string{"localhost"}, extra...)
}

// AddRequestFor is AddRequest for the named nodes.
func (r *Repo) AddRequestFor(name, profile string, nodes []string, extra ...string) {
	r.t.Helper()
	s := fmt.Sprintf("apiVersion: %s\nkind: CertificationRequest\nmetadata:\n  name: %s\nspec:\n  profile: %s\n  nodes: [%s]\n", specs.APIVersion, name, profile, strings.Join(nodes, ", "))
	for _, e := range extra {
		s += "  " + e + "\n"
	}
	r.WriteFile("requests/"+name+".yaml", s)
}

// AddStanding writes a standing certification named name of profile, with
// lines (e.g. "nodes: [localhost]", "every: 24h") as its spec after the
// profile.
func (r *Repo) AddStanding(name, profile string, lines ...string) {
	r.t.Helper()
	s := fmt.Sprintf("apiVersion: %s\nkind: StandingCertification\nmetadata:\n  name: %s\nspec:\n  profile: %s\n", specs.APIVersion, name, profile)
	for _, l := range lines {
		s += "  " + l + "\n"
	}
	r.WriteFile("standing/"+name+".yaml", s)
}

// Approve runs `signet sign` with keyFile over objects ("Kind/name"),
// with action "" (the objects), "cancel" or "release", and commits it.
func (r *Repo) Approve(keyFile, action string, objects ...string) string {
	r.t.Helper()
	args := []string{"sign", "--repo", r.Dir, "--key", keyFile}
	for _, o := range objects {
		args = append(args, "--object", o)
	}
	if action != "" {
		args = append(args, "--action", action)
	}
	out, err := exec.Command(Signet(r.t), args...).CombinedOutput()
	require.NoError(r.t, err, "signet %s:\n%s", strings.Join(args, " "), out)
	return r.Commit("approve " + strings.Join(objects, " ") + " " + action)
}

// Effects returns the side-effect lines the scripts left, "<run> <check>".
func (r *Repo) Effects() []string {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.Side, "effects"))
	require.NoError(r.t, err)
	if len(b) == 0 {
		return nil
	}
	return strings.Fields(strings.ReplaceAll(string(b), " ", "/"))
}

// Evidence reads the evidence branch of a repository through stock git.
type Evidence struct {
	t      testing.TB
	Dir    string
	Branch string
	Key    *signing.PublicKey
}

// NewEvidence reads branch of the Git repository dir, verifying documents
// against key.
func NewEvidence(t testing.TB, dir, branch string, key *signing.PublicKey) *Evidence {
	return &Evidence{t: t, Dir: dir, Branch: branch, Key: key}
}

// Exists reports whether the branch exists.
func (e *Evidence) Exists() bool {
	_, err := gittest.Run(e.t, e.Dir, nil, "rev-parse", "--verify", "-q", "refs/heads/"+e.Branch)
	return err == nil
}

// Files lists every file on the branch, empty when there is no branch.
func (e *Evidence) Files() []string {
	e.t.Helper()
	if !e.Exists() {
		return nil
	}
	out := gittest.Git(e.t, e.Dir, "ls-tree", "-r", "--name-only", e.Branch)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// Under lists the files under dir (a prefix ending without "/").
func (e *Evidence) Under(dir string) []string {
	var out []string
	for _, f := range e.Files() {
		if strings.HasPrefix(f, dir+"/") {
			out = append(out, f)
		}
	}
	return out
}

// Read returns the bytes of the file p on the branch.
func (e *Evidence) Read(p string) []byte {
	e.t.Helper()
	cmd := gittest.Cmd(e.t, e.Dir, "show", e.Branch+":"+p)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	require.NoError(e.t, cmd.Run(), "git show %s:%s: %s", e.Branch, p, stderr.String())
	return out.Bytes()
}

// Document reads the DSSE envelope at p, requires a valid signature by
// the evidence key and predicate type pred, and decodes the predicate into v.
func (e *Evidence) Document(p, pred string, v any) {
	e.t.Helper()
	env, err := signing.ParseEnvelope(e.Read(p))
	require.NoError(e.t, err, p)
	require.NotEmpty(e.t, env.VerifiedKeyIDs(e.Key), "%s: not signed by the reconciler's key", p)
	st, err := env.Statement()
	require.NoError(e.t, err, p)
	require.Equal(e.t, pred, st.PredicateType, p)
	require.NoError(e.t, json.Unmarshal(st.Predicate, v), p)
}

// RunDir returns the run directory of run in cluster through the run-ID
// index, "" when the run was never admitted.
func (e *Evidence) RunDir(cluster, run string) string {
	e.t.Helper()
	for _, f := range e.Files() {
		if strings.HasPrefix(f, "ids/"+cluster+"/") && path.Base(f) == run {
			return strings.TrimSpace(string(e.Read(f)))
		}
	}
	return ""
}

// Count returns how many files match pred.
func (e *Evidence) Count(pred func(string) bool) int {
	return len(slices.DeleteFunc(e.Files(), func(s string) bool { return !pred(s) }))
}
