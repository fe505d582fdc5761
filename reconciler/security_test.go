package reconciler_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/specs"
)

// TestCheckCannotReadSecrets runs a check under a reconciler that reads
// its spec and writes its evidence over smart HTTP with a token. The
// reconciler's key, the token file and the state directory sit in a
// directory every user may enter, protected only by their own modes, as
// in /etc/signet. As root, the check runs as an unprivileged user and can
// read none of them (but can read a world-readable file next to them,
// which proves the probe works), and it sees none of signet's environment.
func TestCheckCannotReadSecrets(t *testing.T) {
	t.Setenv("SIGNET_TEST_CANARY", "do-not-leak")
	e := newEnv(t)
	const token = "s3cr3t-token-for-the-spec-remote"
	srv := gittest.NewHTTPServer(t, gittest.WithAuth(gittest.Auth{Token: token}))
	url, bare := srv.NewRepo("spec")

	secrets := testenv.WorldDir(t)
	key := filepath.Join(secrets, "reconciler.key")
	b, err := os.ReadFile(e.keys.ReconcilerFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(key, b, 0o600))
	tokenFile := filepath.Join(secrets, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	canary := filepath.Join(secrets, "public")
	require.NoError(t, os.WriteFile(canary, []byte("public\n"), 0o644))
	state := filepath.Join(secrets, "state")

	probe := `probe() { if cat "$2" >/dev/null 2>&1; then echo "$1 readable"; else echo "$1 denied"; fi; }
probe key ` + key + `
probe token ` + tokenFile + `
probe public ` + canary + `
if ls ` + state + ` >/dev/null 2>&1; then echo "state readable"; else echo "state denied"; fi
if cat ` + state + `/*/* >/dev/null 2>&1; then echo "state-files readable"; else echo "state-files denied"; fi
if env | grep -q -e SIGNET_TEST_CANARY -e ` + token + `; then echo "env leaked"; else echo "env clean"; fi
echo "uid $(id -u)"
result Pass; exit 0`
	e.repo.AddProfile("probe", "", testenv.Check{Name: "probe", Script: probe})
	e.repo.AddRequest("probe-1", "probe")
	e.repo.Commit("probe")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"probe", requestRef+"probe-1")
	gittest.Git(t, e.repo.Dir, "push", "-q", bare, "main")

	cfg := e.config()
	cfg.Spec.URL, cfg.Spec.TokenFile = url, tokenFile
	cfg.SigningKey, cfg.StateDir = key, state
	r := e.build(cfg)
	runs := e.reconcileAndWait(r)
	require.Contains(t, runs, "probe-1")
	assert.Equal(t, specs.VerdictPass, runs["probe-1"].Verdict, "the run completes")

	ev := testenv.NewEvidence(t, bare, evidence.DefaultBranch, e.keys.Reconciler.Public())
	dir := ev.RunDir(cluster, "probe-1")
	require.NotEmpty(t, dir)
	var ce evidence.CheckEvidence
	ev.Document(evidence.CheckPath(dir, 0, "probe"), evidence.PredicateCheck, &ce)
	require.Len(t, ce.Participants, 1)
	var log string
	for _, l := range ce.Participants[0].Logs {
		if strings.HasSuffix(l.Path, ".stdout.log") {
			log = string(ev.Read(l.Path))
		}
	}
	require.NotEmpty(t, log, "the probe's stdout is in the evidence")
	assert.Contains(t, log, "env clean")
	assert.Contains(t, log, "public readable", "the probe can read a world-readable file: its denials are real")
	if os.Geteuid() == 0 {
		for _, what := range []string{"key", "token", "state", "state-files"} {
			assert.Contains(t, log, what+" denied\n", "a check must not read the reconciler's %s", what)
		}
		assert.NotContains(t, log, "uid 0\n")
	} else {
		// Not root: the check runs as signet's own user (DESIGN §7 only
		// promises a separate user when signet runs as root).
		assert.Contains(t, log, "uid "+strconv.Itoa(os.Geteuid())+"\n")
	}
	assert.NotContains(t, log, token)
}

// TestCeilingRefusedAtAdmission: a profile asking for more than the
// ceiling (privileged, a host path outside the allowed list, an image
// outside the allowed registries) is refused at admission with the
// ExceedsCeiling reason naming the field, and nothing is written.
func TestCeilingRefusedAtAdmission(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	allowed := "registry.example.com/probe@" + digest
	rows := []struct {
		name     string
		workload string
		field    string
	}{
		{"privileged", `{image: "` + allowed + `", securityContext: {privileged: true}}`, "spec.checks[0].workload.securityContext.privileged"},
		{"host-path", `{image: "` + allowed + `", hostPaths: [{path: /etc, mountPath: /host/etc}]}`, "spec.checks[0].workload.hostPaths[0].path"},
		{"registry", `{image: "evil.example.com/probe@` + digest + `"}`, "spec.checks[0].workload.image"},
	}
	e := newEnv(t)
	var objects []string
	for _, row := range rows {
		e.repo.AddProfile(row.name, "", testenv.Check{Name: "pod", Backend: "pod", Workload: row.workload, Script: "result Pass; exit 0"})
		e.repo.AddRequest(row.name+"-1", row.name)
		objects = append(objects, profileRef+row.name, requestRef+row.name+"-1")
	}
	e.repo.Commit("profiles over the ceiling")
	e.repo.Approve(e.keys.ApproverFile, "", objects...)

	cfg := e.config()
	cfg.Ceiling.Registries = []string{"registry.example.com"}
	cfg.Ceiling.HostPaths = []string{"/dev/infiniband"}
	r := e.build(cfg)
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Empty(t, res.Admitted)
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			reason, msg := readyReason(object(t, r, specs.KindRequest, row.name+"-1"))
			assert.Equal(t, "ExceedsCeiling", reason, msg)
			assert.Contains(t, msg, row.field)
			for _, other := range rows {
				if other.field != row.field {
					assert.NotContains(t, msg, other.field)
				}
			}
		})
	}
	assert.False(t, e.evidence().Exists(), "nothing may be written to the evidence branch")
	assert.Empty(t, e.repo.Effects())
}
