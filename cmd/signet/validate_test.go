package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// update rewrites the golden files of this package's tests:
// go test ./cmd/signet/ -run 'Golden' -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// runSpecsCLI runs signet with args and returns stdout, stderr and the
// exit code main would use.
func runSpecsCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	if err != nil {
		errb.WriteString(err.Error())
	}
	return out.String(), errb.String(), reportError(err)
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(p, []byte(got), 0o644))
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run with -update to create %s", p)
	assert.Equal(t, string(want), got)
}

func TestValidateGolden(t *testing.T) {
	tests := []struct {
		name, golden string
		args         []string
		wantCode     int
	}{
		{"valid text", "validate-valid.golden", []string{"validate", "--repo", "testdata/specrepo-valid"}, 0},
		{"valid json", "validate-valid.json.golden", []string{"validate", "--repo", "testdata/specrepo-valid", "--output", "json"}, 0},
		{"invalid text", "validate-invalid.golden", []string{"validate", "--repo", "testdata/specrepo-invalid"}, 1},
		{"invalid json", "validate-invalid.json.golden", []string{"validate", "--repo", "testdata/specrepo-invalid", "-o", "json"}, 1},
		{"spec path", "validate-path.golden", []string{"validate", "--repo", "testdata/specrepo-invalid", "requests"}, 1},
		{"invalid yaml", "validate-invalid.yaml.golden", []string{"validate", "--repo", "testdata/specrepo-invalid", "-o", "yaml"}, 1},
		{"invalid github", "validate-invalid.github.golden", []string{"validate", "--repo", "testdata/specrepo-invalid", "-o", "github"}, 1},
		{"invalid sarif", "validate-invalid.sarif.golden", []string{"validate", "--repo", "testdata/specrepo-invalid", "-o", "sarif"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, code := runSpecsCLI(t, tt.args...)
			assert.Equal(t, tt.wantCode, code)
			golden(t, tt.golden, out)
			// Rendering is deterministic: a second run prints the same.
			again, _, _ := runSpecsCLI(t, tt.args...)
			assert.Equal(t, out, again)
		})
	}
}

// TestValidateAnnotations checks the CI outputs against what their readers
// need: each GitHub workflow command names the file from the checkout's
// root, its line and column, and the SARIF log is 2.1.0 with one result
// per finding at the same place.
func TestValidateAnnotations(t *testing.T) {
	out, _, code := runSpecsCLI(t, "validate", "--repo", "testdata/specrepo-invalid", "-o", "json")
	require.Equal(t, 1, code)
	var report validateReport
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	require.NotEmpty(t, report.Findings)

	gh, _, code := runSpecsCLI(t, "validate", "--repo", "testdata/specrepo-invalid", "-o", "github")
	require.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(gh), "\n")
	require.Len(t, lines, len(report.Findings))
	for i, f := range report.Findings {
		assert.True(t, strings.HasPrefix(lines[i], fmt.Sprintf("::error file=testdata/specrepo-invalid/%s,line=%d,col=%d,title=signet validate::", f.File, f.Line, f.Column)), lines[i])
	}

	sa, _, code := runSpecsCLI(t, "validate", "--repo", "testdata/specrepo-invalid", "-o", "sarif")
	require.Equal(t, 1, code)
	var log sarifLog
	require.NoError(t, json.Unmarshal([]byte(sa), &log))
	assert.Equal(t, "2.1.0", log.Version)
	require.Len(t, log.Runs, 1)
	require.Len(t, log.Runs[0].Results, len(report.Findings))
	for i, f := range report.Findings {
		r := log.Runs[0].Results[i]
		assert.Equal(t, "testdata/specrepo-invalid/"+f.File, r.Locations[0].PhysicalLocation.ArtifactLocation.URI)
		require.NotNil(t, r.Locations[0].PhysicalLocation.Region)
		assert.Equal(t, f.Line, r.Locations[0].PhysicalLocation.Region.StartLine)
		assert.Equal(t, "error", r.Level)
	}

	_, stderr, code := runSpecsCLI(t, "status", "-o", "sarif")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--output: "sarif" is not text, json or yaml`)
}

func TestValidateJSONShape(t *testing.T) {
	out, _, code := runSpecsCLI(t, "validate", "--repo", "testdata/specrepo-invalid", "-o", "json")
	require.Equal(t, 1, code)
	var report validateReport
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	assert.False(t, report.Valid)
	require.NotEmpty(t, report.Findings)
	for _, f := range report.Findings {
		assert.NotEmpty(t, f.File)
		assert.NotEmpty(t, f.Message)
	}
	assert.Contains(t, out, `"field": "spec.checks[1].deadline"`)
	assert.Contains(t, out, `"message": "\"1800\" is not whole seconds (\"1800s\")"`)
}

func TestValidateExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"missing repository", []string{"validate", "--repo", "testdata/no-such-repo"}, 2, "no such file or directory"},
		{"repository is a file", []string{"validate", "--repo", "testdata/validate-valid.golden"}, 2, "is not a directory"},
		{"missing spec path", []string{"validate", "--repo", "testdata/specrepo-valid", "nope"}, 2, "nope"},
		{"spec path escapes", []string{"validate", "--repo", "testdata/specrepo-valid", "../specrepo-invalid"}, 2, `PATH "../specrepo-invalid" is outside --repo "testdata/specrepo-valid"`},
		{"deprecated --path and PATH", []string{"validate", "--repo", "testdata/specrepo-valid", "requests", "--path", "requests"}, 2, "give the spec path once"},
		{"URL repository", []string{"validate", "--repo", "https://git.example.invalid/specs.git"}, 2, `--repo "https://git.example.invalid/specs.git": this command reads a local directory`},
		{"bad output format", []string{"validate", "--repo", "testdata/specrepo-valid", "-o", "xml"}, 2, `"xml" is not text, json, yaml, github or sarif`},
		{"two arguments", []string{"validate", "a", "b"}, 2, "accepts at most 1 arg"},
		{"unknown flag", []string{"validate", "--frobnicate"}, 2, "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runSpecsCLI(t, tt.args...)
			assert.Equal(t, tt.wantCode, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tt.wantErr)
		})
	}
}

// The spec repository of examples/ is what the README's quick start
// validates; it must stay valid, at the root and in its overlay.
func TestValidateExampleSpecRepo(t *testing.T) {
	repo := filepath.Join("..", "..", "examples", "spec-repo")
	for _, args := range [][]string{{"validate", "--repo", repo}, {"validate", "--repo", repo, "overlays/cluster-b"}} {
		t.Run(strings.Join(args[2:], " "), func(t *testing.T) {
			out, errOut, code := runSpecsCLI(t, args...)
			assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			assert.Contains(t, out, ": valid (")
		})
	}
}

// TestVersionFlag: `signet --version` prints what `signet version` does.
func TestVersionFlag(t *testing.T) {
	flag, _, code := runSpecsCLI(t, "--version")
	require.Equal(t, 0, code)
	cmd, _, code := runSpecsCLI(t, "version")
	require.Equal(t, 0, code)
	assert.Equal(t, cmd, flag)
	assert.True(t, strings.HasPrefix(flag, "signet "), flag)
}

// TestHelpExitCodes: `signet help exit-codes` prints the one table, and
// no two exit constants share a code (issue 17: no code means two things).
func TestHelpExitCodes(t *testing.T) {
	out, _, code := runSpecsCLI(t, "help", "exit-codes")
	require.Equal(t, 0, code)
	for _, want := range []string{"  1   findings", "  2   usage or I/O error", "  3   not approved", "  10  signet run: verdict Fail", "  13  signet run: verdict Canceled"} {
		assert.Contains(t, out, want)
	}
	codes := map[int]string{}
	for name, c := range map[string]int{
		"ok": exitOK, "findings": exitFindings, "usage": exitUsage, "not approved": exitNotApproved, "unsigned": exitUnsigned,
		"waiting": exitWaiting, "fail": exitRunFail, "error": exitRunError, "inconclusive": exitRunInconclusive, "canceled": exitRunCanceled,
	} {
		assert.NotContains(t, codes, c, "%s and %s share exit code %d", name, codes[c], c)
		codes[c] = name
	}
}

// TestCompletion: the shell completes --output with each command's
// formats, and every command has examples in its help.
func TestCompletion(t *testing.T) {
	out, _, code := runSpecsCLI(t, "__complete", "validate", "--output", "")
	require.Equal(t, 0, code)
	assert.Equal(t, []string{"text", "json", "yaml", "github", "sarif", ":4"}, strings.Fields(out)[:6])
	out, _, _ = runSpecsCLI(t, "__complete", "status", "-o", "")
	assert.Equal(t, []string{"text", "json", "yaml", ":4"}, strings.Fields(out)[:4])

	for _, c := range newRootCmd().Commands() {
		if c.Hidden || !c.IsAvailableCommand() || c.Name() == "help" || c.Name() == "completion" || c.Name() == "version" {
			continue
		}
		assert.NotEmpty(t, c.Example, "signet %s has no examples in its help", c.Name())
	}
}
