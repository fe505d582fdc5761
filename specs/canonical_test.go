package specs

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func jsonValue(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(b, &v))
	return v
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"sorted keys, no spaces", map[string]any{"b": 1, "a": []any{true, nil, "x"}}, `{"a":[true,null,"x"],"b":1}`},
		{"ES6 numbers", map[string]any{"n": 1e21, "f": 0.5, "i": 100.0}, `{"f":0.5,"i":100,"n":1e+21}`},
		{"UTF-16 order and escapes", map[string]any{"é": "<>&", "z": "\u2028"}, "{\"z\":\"\u2028\",\"é\":\"<>&\"}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalJSON(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
		})
	}
}

func TestCanonicalRequestCoversExecutionFieldsOnly(t *testing.T) {
	base := `apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: r
  labels: {a: b}
spec:
  profile: p
  nodes: [n1, n2]
`
	parse := func(s string) *Object {
		objs, f := ParseDocuments("r.yaml", []byte(s))
		require.Empty(t, f)
		require.Len(t, objs, 1)
		return objs[0]
	}
	o := parse(base)
	assert.Equal(t, `{"apiVersion":"signet.dev/v1alpha1","kind":"CertificationRequest","metadata":{"name":"r"},"spec":{"nodes":["n1","n2"],"profile":"p"}}`, string(o.Canonical))
	assert.Equal(t, o.Digest, parse(base+"  cancel: true\n  release: true\n").Digest, "cancel and release are not execution fields")
	assert.NotEqual(t, o.Digest, parse(base[:len(base)-len("  nodes: [n1, n2]\n")]+"  nodes: [n2, n1]\n").Digest, "node order is an execution field")
	noLabels := parse("apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata: {name: r}\nspec: {profile: p, nodes: [n1, n2]}\n")
	assert.Equal(t, o.Digest, noLabels.Digest, "labels are not part of the canonical form")
}

func TestCanonicalProfileDefaultsOnFailure(t *testing.T) {
	r1, err := Render(baseRepo(t, edit{file: gpuFile, old: "  onFailure: stop\n", new: ""}), ".")
	require.NoError(t, err)
	require.Empty(t, r1.Findings)
	r2, err := Render(baseRepo(t, edit{file: gpuFile, old: "onFailure: stop", new: "onFailure: continue"}), ".")
	require.NoError(t, err)
	require.Empty(t, r2.Findings)
	assert.Equal(t, r1.Profile("gpu-burnin").Digest, r2.Profile("gpu-burnin").Digest)
	assert.Contains(t, string(r1.Profile("gpu-burnin").Canonical), `"onFailure":"continue"`)
	assert.Contains(t, string(r1.Profile("gpu-burnin").Canonical), `"deadline":"600s"`)
}
