package schemagen

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

var update = flag.Bool("update", false, "rewrite schemas/ and docs/reference/")

// root is the repository root.
const root = "../../.."

func docs(t *testing.T) Docs {
	t.Helper()
	d, err := ReadDocs(filepath.Join(root, "specs"), filepath.Join(root, "signing"), filepath.Join(root, "reconciler"))
	require.NoError(t, err)
	return d
}

// TestSchemasUpToDate fails when a kind's Go type changed and its JSON
// Schema under schemas/ was not regenerated (go test ./internal/tools/schemagen -update).
func TestSchemasUpToDate(t *testing.T) {
	d := docs(t)
	for _, k := range Kinds {
		got, err := Schema(k, d)
		require.NoError(t, err)
		checkGenerated(t, filepath.Join(root, "schemas", FileName(k.Kind)), got)
	}
}

// TestReferenceUpToDate is TestSchemasUpToDate for docs/reference/.
func TestReferenceUpToDate(t *testing.T) {
	d := docs(t)
	for _, k := range Kinds {
		checkGenerated(t, filepath.Join(root, "docs", "reference", strings.ToLower(k.Kind)+".md"), Reference(k, d))
	}
}

func checkGenerated(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
		require.NoError(t, os.WriteFile(file, got, 0o644))
		return
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err, "run go test ./internal/tools/schemagen -update")
	assert.Equal(t, string(want), string(got), "%s drifted from the Go types: run go test ./internal/tools/schemagen -update", file)
}

// TestEveryConfigFieldDocumented asserts every field of the ReconcilerConfig
// and the TrustPolicy has a doc comment, so the reference documents each
// (sshKeyFile, workRoot, passphraseEnv... were once found only in the
// code). The spec kinds' fields are described in docs/design.md §2.
func TestEveryConfigFieldDocumented(t *testing.T) {
	d := docs(t)
	for _, k := range Kinds {
		if slices.Contains(specs.Kinds, k.Kind) {
			continue
		}
		for _, line := range strings.Split(string(Reference(k, d)), "\n") {
			if strings.HasPrefix(line, "| `") {
				assert.False(t, strings.HasSuffix(line, "|  |"), "%s: undocumented field: %s", k.Kind, line)
			}
		}
	}
}

// kubeconform runs the real kubeconform (built into bin/ by make tools)
// with the schemas of schemas/ over paths, and returns its output and
// whether it passed.
func kubeconform(t *testing.T, paths ...string) (string, bool) {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(root, "bin", "kubeconform"))
	require.NoError(t, err)
	require.FileExists(t, bin, "make tools builds kubeconform into bin/")
	schemas, err := filepath.Abs(filepath.Join(root, "schemas"))
	require.NoError(t, err)
	args := append([]string{"-strict", "-summary", "-skip", "Kustomization",
		"-schema-location", schemas + "/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json"}, paths...)
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err == nil
}

// TestKubeconformExamples validates every example file of the four kinds
// with real kubeconform and signet's schemas, and checks that each example
// also passes signet's own strict reader.
func TestKubeconformExamples(t *testing.T) {
	examples := []string{
		filepath.Join(root, "examples", "spec-repo", "profiles"),
		filepath.Join(root, "examples", "spec-repo", "requests"),
		filepath.Join(root, "examples", "spec-repo", "overlays", "cluster-b", "requests"),
		filepath.Join(root, "examples", "reconciler"),
	}
	out, ok := kubeconform(t, examples...)
	assert.True(t, ok, "kubeconform refused an example:\n%s", out)
	assert.Contains(t, out, "Invalid: 0, Errors: 0")
	assert.NotContains(t, out, "Valid: 0,", "kubeconform validated nothing:\n%s", out)

	cfg, err := reconciler.LoadConfig(filepath.Join(root, "examples", "reconciler", "config.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "cluster-a", cfg.Cluster)
	_, err = signing.LoadTrustPolicy(filepath.Join(root, "examples", "reconciler", "trust-policy.yaml"))
	require.NoError(t, err)

	// The example config is deploy/base's, behind its header comment.
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "base", "config.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &cm))
	ex, err := os.ReadFile(filepath.Join(root, "examples", "reconciler", "config.yaml"))
	require.NoError(t, err)
	body := string(ex)
	for strings.HasPrefix(body, "#") {
		_, body, _ = strings.Cut(body, "\n")
	}
	assert.Equal(t, cm.Data["config.yaml"], body, "examples/reconciler/config.yaml drifted from deploy/base/config.yaml")
}

// TestExamplesHaveModeline asserts every example of the four kinds names
// its schema for yaml-language-server, so that editors complete and check
// it.
func TestExamplesHaveModeline(t *testing.T) {
	var files []string
	for _, dir := range []string{"examples/spec-repo/profiles", "examples/spec-repo/requests", "examples/spec-repo/overlays/cluster-b/requests", "examples/reconciler"} {
		m, err := filepath.Glob(filepath.Join(root, dir, "*.yaml"))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, k := range Kinds {
			if bytes.Contains(b, []byte("\nkind: "+k.Kind+"\n")) {
				assert.Contains(t, string(b), "# yaml-language-server: $schema=", f)
				assert.Contains(t, string(b), "schemas/"+FileName(k.Kind), f)
			}
		}
	}
}

// TestKubeconformRefusesBadInputs runs kubeconform over the spec corpus's
// inputs that break a rule the schemas state (unknown fields, wrong
// types, seconds without their unit): each is refused, naming the field.
func TestKubeconformRefusesBadInputs(t *testing.T) {
	corpus := filepath.Join(root, "specs", "testdata", "corpus")
	for _, input := range []string{
		"parse-seconds-kind.txtar", "parse-seconds-bare.txtar", "parse-list-kind.txtar", "parse-string-kind.txtar",
		"parse-int-kind.txtar", "parse-bool-kind.txtar", "parse-mapping-kind.txtar", "parse-unknown-field.txtar",
		"parse-unknown-field-typo.txtar",
	} {
		t.Run(input, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(corpus, input))
			require.NoError(t, err)
			dir := t.TempDir()
			n := 0
			for name, data := range txtarFiles(b) {
				if !strings.HasSuffix(name, ".yaml") || !bytes.Contains(data, []byte("apiVersion: "+specs.APIVersion)) {
					continue
				}
				require.NoError(t, os.WriteFile(filepath.Join(dir, strings.ReplaceAll(name, "/", "_")), data, 0o644))
				n++
			}
			require.NotZero(t, n, "no signet document in %s", input)
			out, ok := kubeconform(t, dir)
			assert.False(t, ok, "kubeconform accepted %s:\n%s", input, out)
			assert.Contains(t, out, "is invalid", out)
		})
	}
}

// txtarFiles returns the files of a txtar archive ("-- name --" lines).
func txtarFiles(b []byte) map[string][]byte {
	files := map[string][]byte{}
	var name string
	var cur bytes.Buffer
	flush := func() {
		if name != "" {
			files[name] = bytes.Clone(cur.Bytes())
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if n, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "-- "); ok && strings.HasSuffix(n, " --") {
			flush()
			name = strings.TrimSuffix(n, " --")
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return files
}
