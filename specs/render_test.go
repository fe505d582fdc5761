package specs

import (
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
