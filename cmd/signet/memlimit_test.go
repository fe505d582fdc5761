package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence/audit"
)

// TestMemoryLimit: signet audit and signet report set the process's soft
// memory limit (--memory-limit, audit.DefaultMemoryLimit unless given;
// GOMEMLIMIT wins when set and the flag is not given); a value that is not
// a usable number of bytes is a usage error naming the flag and the value,
// and nothing is audited.
func TestMemoryLimit(t *testing.T) {
	f := evidenceFixture(t)
	sentinel := int64(333 << 20)
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	for _, c := range []struct {
		name     string
		env      string
		flags    []string
		want     int64
		wantCode int
		wantErr  string
	}{
		{name: "default", want: audit.DefaultMemoryLimit},
		{name: "given", flags: []string{"--memory-limit", "900Mi"}, want: 900 << 20},
		{name: "none", flags: []string{"--memory-limit", "0"}, want: math.MaxInt64},
		{name: "GOMEMLIMIT wins over the default", env: "1GiB", want: sentinel},
		{name: "the flag wins over GOMEMLIMIT", env: "1GiB", flags: []string{"--memory-limit", "2Gi"}, want: 2 << 30},
		{name: "not a quantity", flags: []string{"--memory-limit", "lots"}, want: sentinel, wantCode: exitAuditUsage, wantErr: `--memory-limit "lots"`},
		{name: "too small", flags: []string{"--memory-limit", "1Ki"}, want: sentinel, wantCode: exitAuditUsage, wantErr: `--memory-limit "1Ki": want 0 (no limit) or a whole number of bytes of at least 64Mi`},
		{name: "negative", flags: []string{"--memory-limit", "-1Gi"}, want: sentinel, wantCode: exitAuditUsage, wantErr: `--memory-limit "-1Gi"`},
	} {
		for _, cmd := range []string{"audit", "report"} {
			t.Run(c.name+"/"+cmd, func(t *testing.T) {
				t.Setenv("GOMEMLIMIT", c.env)
				debug.SetMemoryLimit(sentinel)
				args := []string{cmd, "--repo", f.Repo, "--trust", f.TrustFile}
				if cmd == "report" {
					args = append(args, "--out", t.TempDir())
				}
				out, errOut, code := runSigningCLI(t, append(args, c.flags...)...)
				assert.Equal(t, c.wantCode, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
				if c.wantErr != "" {
					assert.Contains(t, errOut, c.wantErr)
					assert.Empty(t, out, "a usage error audits nothing")
				}
				require.Equal(t, c.want, debug.SetMemoryLimit(-1), "the process's memory limit after signet %s", cmd)
			})
		}
	}
}
