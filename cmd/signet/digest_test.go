package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

// runDigestCmd runs the root command with args and returns stdout and the
// process exit code main would use.
func runDigestCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), reportError(err)
}

// coreutils runs DESIGN §3's pipeline, verbatim, on dir.
func coreutils(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", `cd "$1" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum`, "sh", dir).CombinedOutput()
	require.NoError(t, err, "coreutils pipeline: %s", out)
	hex, _, ok := strings.Cut(string(out), "  -")
	require.True(t, ok, "unexpected sha256sum output %q", out)
	return "sha256:" + hex
}

func TestDigestBundleMatchesCoreutils(t *testing.T) {
	awkward := t.TempDir()
	for p, content := range map[string]string{
		"run check.sh":      "#!/bin/sh\n",
		"é/日本.txt":          "non-ASCII\n",
		"a-b":               "dash\n",
		"a/b":               "slash\n",
		"B":                 "upper\n",
		"empty":             "",
		"deep/er/x y/z.txt": "nested with a space\n",
	} {
		full := filepath.Join(awkward, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	dirs := map[string]string{"awkward names": awkward}
	examples, err := filepath.Glob("../../examples/spec-repo/bundles/*")
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	for _, e := range examples {
		dirs[filepath.Base(e)] = e
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			want := coreutils(t, dir)

			out, code := runDigestCmd(t, "digest", "bundle", dir)
			require.Equal(t, 0, code, out)
			assert.Equal(t, want+"\n", out)

			out, code = runDigestCmd(t, "digest", "bundle", "--output", "json", dir)
			require.Equal(t, 0, code, out)
			var got struct {
				Path   string             `json:"path"`
				Digest string             `json:"digest"`
				Files  []specs.BundleFile `json:"files"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &got))
			assert.Equal(t, dir, got.Path)
			assert.Equal(t, want, got.Digest)
			require.NotEmpty(t, got.Files)
			for _, f := range got.Files {
				b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
				require.NoError(t, err)
				assert.Equal(t, specs.DigestOf(b), f.Digest, f.Path)
			}
		})
	}
}

func TestDigestBundleErrors(t *testing.T) {
	withSymlink := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(withSymlink, "ok.sh"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink("/etc/hostname", filepath.Join(withSymlink, "link")))
	backslash := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(backslash, `a\b`), []byte("x"), 0o644))

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantMsg  string
	}{
		{name: "symlink", args: []string{"digest", "bundle", withSymlink}, wantCode: 1, wantMsg: filepath.Join(withSymlink, "link") + ": is a symlink"},
		{name: "backslash name", args: []string{"digest", "bundle", backslash}, wantCode: 1, wantMsg: "sha256sum"},
		{name: "empty bundle", args: []string{"digest", "bundle", t.TempDir()}, wantCode: 1, wantMsg: "holds no regular file"},
		{name: "missing directory", args: []string{"digest", "bundle", filepath.Join(t.TempDir(), "nope")}, wantCode: 2, wantMsg: "no such file"},
		{name: "no argument", args: []string{"digest", "bundle"}, wantCode: 2},
		{name: "two arguments", args: []string{"digest", "bundle", "a", "b"}, wantCode: 2},
		{name: "bad output format", args: []string{"digest", "bundle", "-o", "xml", withSymlink}, wantCode: 2, wantMsg: "--output"},
		{name: "no subcommand", args: []string{"digest"}, wantCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := newRootCmd()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(tt.args)
			err := root.ExecuteContext(t.Context())
			require.Error(t, err)
			assert.Equal(t, tt.wantCode, reportError(err))
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.NotContains(t, out.String(), "sha256:", "no digest is printed on error")
		})
	}
}
