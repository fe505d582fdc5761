package specs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFinding21_8SignetMountPathsRefused: a profile whose host path is
// mounted at, under or above a path signet mounts or writes in the check
// container (the installed `signet exec`, the script, the work directory,
// the termination message) is refused by spec validation, before admission
// and before any pod exists. Before issue 21 `mountPath: /signet-bin/signet`
// from an allowed host directory replaced `signet exec` and a failing
// script was recorded as Pass.
func TestFinding21_8SignetMountPathsRefused(t *testing.T) {
	for _, mp := range []string{"/signet-bin/signet", "/signet-bin", "/signet-script", "/signet-work/out", "/dev/termination-log", "/dev", "/"} {
		t.Run(mp, func(t *testing.T) {
			r, err := Render(baseRepo(t, edit{file: gpuFile, old: "mountPath: /dev/infiniband", new: "mountPath: " + mp}), ".")
			require.NoError(t, err)
			want := Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.hostPaths[0].mountPath", Message: "would cover signet's own"}
			assert.True(t, hasFinding(r.Findings, want), "mount path %s admitted; findings:\n%s", mp, findingLines(r.Findings))
		})
	}
	t.Run("a device path beside them", func(t *testing.T) {
		r, err := Render(baseRepo(t), ".")
		require.NoError(t, err)
		assert.Empty(t, r.Findings, "the base repository keeps /dev/infiniband")
	})
}
