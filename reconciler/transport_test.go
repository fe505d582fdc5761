package reconciler_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/specs"
)

// TestSpecTransports reads the same approved spec from a local path, a
// file:// URL and smart HTTP with a token, and runs its request; a wrong
// token fails the pass with an error that names the remote but never the
// token, and admits nothing.
func TestSpecTransports(t *testing.T) {
	const token = "the-right-token-0123456789"
	e := newEnv(t)
	e.repo.AddProfile("smoke", "", testenv.Check{Name: "ok", Script: "result Pass; exit 0"})
	e.repo.AddRequest("smoke-1", "smoke")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"smoke", requestRef+"smoke-1")
	srv := gittest.NewHTTPServer(t, gittest.WithAuth(gittest.Auth{Token: token}))
	url, bare := srv.NewRepo("spec")
	gittest.Git(t, e.repo.Dir, "push", "-q", bare, "main")

	rows := []struct {
		name, url, token string
		ok               bool
	}{
		{"local path", e.repo.Dir, "", true},
		{"file URL", "file://" + e.repo.Dir, "", true},
		{"http with token", url, token, true},
		{"http with a wrong token", url, "a-wrong-token-9876543210", false},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			cfg := e.config()
			cfg.StateDir = filepath.Join(t.TempDir(), "state")
			cfg.Spec.URL = row.url
			// Evidence goes to a bare repository of its own, so that each
			// row starts from an empty branch.
			evDir := filepath.Join(t.TempDir(), "evidence.git")
			gittest.InitBare(t, evDir)
			cfg.Evidence.URL = evDir
			if row.token != "" {
				cfg.Spec.TokenFile = filepath.Join(t.TempDir(), "token")
				require.NoError(t, os.WriteFile(cfg.Spec.TokenFile, []byte(row.token), 0o600))
			}
			sub := *e
			sub.t = t
			r := sub.build(cfg)
			res, err := r.ReconcileOnce(t.Context())
			if !row.ok {
				require.Error(t, err)
				assert.NotContains(t, err.Error(), row.token)
				assert.NotContains(t, err.Error(), token)
				st := r.Status()
				require.NotEmpty(t, st.Conditions)
				assert.NotContains(t, st.Conditions[0].Message, row.token)
				return
			}
			require.NoError(t, err)
			require.Equal(t, []string{"smoke-1"}, res.Admitted)
			assert.Equal(t, specs.VerdictPass, sub.wait(r, "smoke-1").Verdict)
		})
	}
}
