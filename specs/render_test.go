package specs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRenderBaseRepoIsValid(t *testing.T) {
	r, err := Render(baseRepo(t), ".")
	require.NoError(t, err)
	assert.Empty(t, r.Findings)
	var refs []string
	for _, o := range r.Objects {
		refs = append(refs, o.Ref())
	}
	assert.Equal(t, []string{
		"CertificationProfile/cpu-local", "CertificationProfile/gpu-burnin",
		"CertificationRequest/rack-1", "CertificationRequest/rack-2", "CertificationRequest/this-machine",
	}, refs)
}

// An oversized spec file is reported and never read; the rest of the
// repository is still rendered and checked.
func TestRenderOversizeFileDoesNotHideTheRest(t *testing.T) {
	big := strings.Repeat("#", MaxSpecFileBytes+1)
	r, err := Render(baseRepo(t,
		edit{file: "profiles/big.yaml", new: big},
		edit{file: reqFile, old: "count: 4", new: "count: 9"}), ".")
	require.NoError(t, err)
	assert.Len(t, r.Objects, 5)
	require.Len(t, r.Findings, 2)
	assert.Equal(t, "profiles/big.yaml", r.Findings[0].File)
	assert.Equal(t, "spec.count", r.Findings[1].Field)
}

// A spec path that LoadDocuments refuses is a finding (exit 1 in validate),
// not an I/O error.
func TestRenderRefusedKustomizationIsAFinding(t *testing.T) {
	r, err := Render(baseRepo(t, edit{file: "kustomization.yaml", new: "resources:\n  - https://github.com/example/specs//profiles?ref=main\n"}), ".")
	require.NoError(t, err)
	require.Len(t, r.Findings, 1)
	assert.Equal(t, "kustomization.yaml", r.Findings[0].File)
	assert.Equal(t, -1, r.Findings[0].Document)
	assert.Contains(t, r.Findings[0].Message, "remote")
	assert.Empty(t, r.Objects)
}

func TestRenderMissingDirIsAnError(t *testing.T) {
	_, err := Render(baseRepo(t), "nope")
	require.Error(t, err)
	_, err = Render(baseRepo(t), "../x")
	require.Error(t, err)
}

func TestRenderKustomize(t *testing.T) {
	r, err := Render(baseRepo(t,
		edit{file: "profiles/kustomization.yaml", new: "resources: [gpu.yaml, local.yml]\n"},
		edit{file: "requests/kustomization.yaml", new: "resources: [requests.yaml]\n"},
		edit{file: "overlay/kustomization.yaml", new: "resources:\n  - ../profiles\n  - ../requests\npatches:\n  - target: {kind: CertificationProfile, name: gpu-burnin}\n    patch: |-\n      - op: replace\n        path: /spec/checks/1/deadline\n        value: 1200s\n"}), "overlay")
	require.NoError(t, err)
	require.Empty(t, r.Findings, findingLines(r.Findings))
	p := r.Profile("gpu-burnin")
	require.NotNil(t, p)
	assert.Equal(t, Seconds(1200), p.Profile.Spec.Checks[1].Deadline)
	assert.NotNil(t, r.Request("rack-1"))
	assert.Nil(t, r.Request("nope"))
	assert.Contains(t, r.Bundles, "gpu-burnin")
}
