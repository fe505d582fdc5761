package signing

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadApprovals(t *testing.T) {
	alice := testKey(t, "a", AlgorithmECDSAP256)
	good, err := SignApproval([]Subject{SubjectFor("CertificationProfile/p", digestOf("p"))}, ApprovalPredicate{}, alice)
	require.NoError(t, err)
	fsys := fstest.MapFS{
		"specs/.signet/approvals/a.json":        {Data: good},
		"specs/.signet/approvals/sub/b.json":    {Data: good},
		"specs/.signet/approvals/.gitkeep":      {Data: nil},
		"specs/.signet/approvals/broken.json":   {Data: good[:30]},
		"specs/.signet/approvals/link.json":     {Data: []byte("a.json"), Mode: fs.ModeSymlink | 0o777},
		"specs/.signet/approvals/zz-after.json": {Data: good},
	}
	as, errs := LoadApprovals(fsys, "specs")
	require.Len(t, as, 3, "a bad file never stops the others")
	assert.Equal(t, "specs/.signet/approvals/a.json", as[0].Path)
	assert.Equal(t, "specs/.signet/approvals/sub/b.json", as[1].Path)
	assert.Equal(t, "specs/.signet/approvals/zz-after.json", as[2].Path)
	require.Len(t, errs, 2)
	assert.Contains(t, errs[0].Error(), "specs/.signet/approvals/broken.json")
	assert.Contains(t, errs[1].Error(), "specs/.signet/approvals/link.json: not a regular file")

	as, errs = LoadApprovals(fstest.MapFS{"x.yaml": {}}, ".")
	assert.Empty(t, as)
	assert.Empty(t, errs, "no approvals directory means no approvals")
}
