package reconciler_test

import (
	"log/slog"
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

// TestSigningKeyNotAnEvidenceSigner: a reconciler whose key the trust
// policy does not list as an evidence signer refuses to start and says
// which keys the policy expects (issue 17), instead of writing evidence
// the audit would refuse.
func TestSigningKeyNotAnEvidenceSigner(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.SigningKey = e.keys.ApproverFile // an approver, not an evidence signer
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(t, err)
	_, _, err = reconciler.Build(t.Context(), cfg, sec, slog.New(slog.DiscardHandler), nil, reconciler.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "signingKey: key "+e.keys.Approver.Public().KeyID()[:16]+" of "+cfg.SigningKey+" is not an evidence signer of the trust policy")
	assert.Contains(t, err.Error(), "which expects "+e.keys.Reconciler.Public().KeyID()[:16])
	assert.Contains(t, err.Error(), "add "+e.keys.Approver.Public().KeyID()+" to its spec.evidenceSigners")
}

// TestAdmissionConcurrencyConfig: admission.concurrency is read strictly
// and bounded; 0 (unset) is the default.
func TestAdmissionConcurrencyConfig(t *testing.T) {
	for _, tc := range []struct {
		name, admission, want string
	}{
		{"unset", "", ""},
		{"one", "admission: {concurrency: 1}", ""},
		{"max", "admission: {concurrency: 64}", ""},
		{"negative", "admission: {concurrency: -1}", "admission.concurrency: -1 is not between 1 and 64"},
		{"above the bound", "admission: {concurrency: 65}", "admission.concurrency: 65 is not between 1 and 64"},
		{"misspelled", "admission: {concurency: 4}", `admission.concurency: unknown field; did you mean "concurrency"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config.yaml")
			body := "apiVersion: signet.dev/v1alpha1\nkind: ReconcilerConfig\ncluster: c\nspec: {url: /nowhere}\ntrustPolicy: /t\nsigningKey: /k\nstateDir: /s\n" + tc.admission + "\n"
			require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
			_, err := reconciler.LoadConfig(file)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err, "a bad admission.concurrency must be refused")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestKubeAPIRateLimitConfig: kubernetes.apiQPS and apiBurst are read
// strictly and bounded, and RateLimit applies their defaults: 50 a second,
// a burst of twice the rate.
func TestKubeAPIRateLimitConfig(t *testing.T) {
	for _, tc := range []struct {
		name, kube, want string
		qps              float32
		burst            int
	}{
		{name: "unset", qps: 50, burst: 100},
		{name: "rate alone", kube: "kubernetes: {apiQPS: 200}", qps: 200, burst: 400},
		{name: "both", kube: "kubernetes: {apiQPS: 200, apiBurst: 250}", qps: 200, burst: 250},
		{name: "burst alone", kube: "kubernetes: {apiBurst: 60}", qps: 50, burst: 60},
		{name: "max", kube: "kubernetes: {apiQPS: 5000, apiBurst: 10000}", qps: 5000, burst: 10000},
		{name: "negative rate", kube: "kubernetes: {apiQPS: -1}", want: "kubernetes.apiQPS: -1 is not between 1 and 5000 requests a second (0 or unset: 50)"},
		{name: "rate above the bound", kube: "kubernetes: {apiQPS: 50000}", want: "kubernetes.apiQPS: 50000 is not between 1 and 5000"},
		{name: "burst above the bound", kube: "kubernetes: {apiBurst: 10001}", want: "kubernetes.apiBurst: 10001 is not between 1 and 10000 requests"},
		{name: "fraction", kube: "kubernetes: {apiQPS: 2.5}", want: "kubernetes.apiQPS"},
		{name: "misspelled", kube: "kubernetes: {apiQps: 200}", want: `kubernetes.apiQps: unknown field; did you mean "apiQPS"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config.yaml")
			body := "apiVersion: signet.dev/v1alpha1\nkind: ReconcilerConfig\ncluster: c\nspec: {url: /nowhere}\ntrustPolicy: /t\nsigningKey: /k\nstateDir: /s\n" + tc.kube + "\n"
			require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
			cfg, err := reconciler.LoadConfig(file)
			if tc.want != "" {
				require.Error(t, err, "a bad rate limit must be refused")
				assert.Contains(t, err.Error(), tc.want)
				return
			}
			require.NoError(t, err)
			qps, burst := cfg.Kubernetes.RateLimit()
			assert.Equal(t, tc.qps, qps)
			assert.Equal(t, tc.burst, burst)
		})
	}
}
