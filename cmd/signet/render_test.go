package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name, golden string
		args         []string
		wantCode     int
	}{
		{"text", "render-valid.golden", []string{"render", "--repo", "testdata/specrepo-valid"}, 0},
		{"json", "render-valid.json.golden", []string{"render", "--repo", "testdata/specrepo-valid", "-o", "json"}, 0},
		{"with findings", "render-invalid.golden", []string{"render", "--repo", "testdata/specrepo-invalid"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, code := runSpecsCLI(t, tt.args...)
			assert.Equal(t, tt.wantCode, code)
			golden(t, tt.golden, out)
			again, _, _ := runSpecsCLI(t, tt.args...)
			assert.Equal(t, out, again)
		})
	}
}

// render's JSON carries each object's canonical JSON; its digest is the
// sha256 of exactly those bytes, and for a request it leaves out cancel.
func TestRenderJSONDigestsCanonical(t *testing.T) {
	out, _, code := runSpecsCLI(t, "render", "--repo", "testdata/specrepo-valid", "-o", "json")
	require.Equal(t, 0, code)
	var report struct {
		Objects []struct {
			Ref       string          `json:"ref"`
			Digest    specs.Digest    `json:"digest"`
			Canonical json.RawMessage `json:"canonical"`
			Derived   *derivedValues  `json:"derived"`
		} `json:"objects"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	require.Len(t, report.Objects, 5)
	for _, o := range report.Objects {
		canonical, err := specs.CanonicalJSON(jsonAny(t, o.Canonical))
		require.NoError(t, err)
		assert.Equal(t, specs.DigestOf(canonical), o.Digest, o.Ref)
		if o.Ref == "CertificationRequest/this-machine" {
			assert.NotContains(t, string(o.Canonical), "cancel")
		}
		if o.Ref == "CertificationProfile/gpu-burnin" {
			require.NotNil(t, o.Derived)
			assert.Equal(t, specs.Seconds(600+1800+2*60), o.Derived.RunDeadline)
			assert.Equal(t, map[string]string{"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}, o.Derived.Floor)
		}
	}
}

func TestRenderExampleSpecRepo(t *testing.T) {
	out, errOut, code := runSpecsCLI(t, "render", "--repo", filepath.Join("..", "..", "examples", "spec-repo"))
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "run deadline:")
}

func jsonAny(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(b, &v))
	return v
}
