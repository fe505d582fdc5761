package reconciler_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/signing"
)

// TestOneStrictReader asserts the ReconcilerConfig and the TrustPolicy are
// read by the same strict reader as spec documents, with the same finding
// format: file:line:column, the field path, and the nearest known name.
// Before, the config accepted `statedir:` by case-folding and reported
// `json: unknown field "locall"` with no path, and the trust policy said
// `field evidenceSigner not found in type signing.TrustPolicySpec`.
func TestOneStrictReader(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		file := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
		return file
	}
	cfg := write("config.yaml", `apiVersion: signet.dev/v1alpha1
kind: ReconcilerConfig
cluster: c
spec: {url: /nowhere}
trustPolicy: /t
signingKey: /k
statedir: /s
backends:
  locall: {enabled: true}
interval: 60
`)
	_, err := reconciler.LoadConfig(cfg)
	require.Error(t, err)
	for _, want := range []string{
		cfg + `:7:1: statedir: unknown field; did you mean "stateDir"?`,
		cfg + `:9:3: backends.locall: unknown field; did you mean "local"?`,
		cfg + `:10:11: interval: 60 is not whole seconds ("60s")`,
	} {
		assert.Contains(t, err.Error(), want)
	}

	policy := write("trust.yaml", `apiVersion: signet.dev/v1alpha1
kind: TrustPolicy
metadata: {name: p}
spec:
  keys: []
  approvers: []
  evidenceSigner: []
`)
	_, err = signing.LoadTrustPolicy(policy)
	require.Error(t, err)
	assert.Contains(t, err.Error(), policy+`:7:3: spec.evidenceSigner: unknown field; did you mean "evidenceSigners"?`)
}
