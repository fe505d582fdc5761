package specs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitDocuments(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "single", in: "a: 1\n", want: []string{"a: 1\n"}},
		{name: "no trailing newline", in: "a: 1", want: []string{"a: 1"}},
		{name: "two", in: "a: 1\n---\nb: 2\n", want: []string{"a: 1\n", "\nb: 2\n"}},
		{name: "leading marker", in: "---\na: 1\n", want: []string{"\na: 1\n"}},
		{name: "marker with comment", in: "a: 1\n--- # second\nb: 2\n", want: []string{"a: 1\n", " # second\nb: 2\n"}},
		{name: "marker with tab and CRLF", in: "a: 1\r\n---\t\r\nb: 2\r\n", want: []string{"a: 1\r\n", "\t\r\nb: 2\r\n"}},
		{name: "marker at end of input", in: "a: 1\n---", want: []string{"a: 1\n"}},
		{name: "content on the marker line", in: "--- {a: 1}\n--- |\n  text\n", want: []string{" {a: 1}\n", " |\n  text\n"}},
		{name: "empty and comment-only documents take no index", in: "---\n# only a comment\n---\n\n---\na: 1\n---\n", want: []string{"\na: 1\n"}},
		{name: "directives are dropped with their empty document", in: "%YAML 1.2\n---\na: 1\n", want: []string{"\na: 1\n"}},
		{name: "document end marker", in: "a: 1\n...\n---\nb: 2\n...\n", want: []string{"a: 1\n", "\nb: 2\n"}},
		{name: "bare document after end marker", in: "a: 1\n...\nb: 2\n", want: []string{"a: 1\n", "b: 2\n"}},
		{
			name: "not markers: longer dashes, no separator, indented",
			in:   "a: |\n  ---\n  text\n----\nb: ---x\n---x: 1\n",
			want: []string{"a: |\n  ---\n  text\n----\nb: ---x\n---x: 1\n"},
		},
		{name: "empty input", in: "", want: nil},
		{name: "only markers", in: "---\n---\n...\n", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, d := range SplitDocuments([]byte(tt.in)) {
				got = append(got, string(d))
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

const (
	profileDoc = "apiVersion: signet.dev/v1alpha1\nkind: CertificationProfile\nmetadata:\n  name: p\nspec:\n  checks:\n  - name: c\n    deadline: 60s\n"
	requestDoc = "apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: r\nspec:\n  profile: p\n"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s), Mode: 0o644} }

func TestLoadDocumentsPlain(t *testing.T) {
	fsys := fstest.MapFS{
		"specs/profiles/p.yaml":          file("# the profile\n" + profileDoc + "---\n" + requestDoc),
		"specs/requests/r.yml":           file(requestDoc),
		"specs/a-b.yaml":                 file("a: dash sorts before slash\n"),
		"specs/a/b.yaml":                 file("a: in a directory\n"),
		"specs/README.md":                file("not yaml"),
		"specs/bundles/x/run.sh":         file("#!/bin/sh\n"),
		"specs/.signet/approvals/a.yaml": file("never: read\n"),
		"specs/.github/workflows/c.yaml": file("never: read\n"),
		"specs/.hidden.yaml":             file("never: read\n"),
		"specs/empty.yaml":               file("# nothing here\n"),
		"outside.yaml":                   file("never: read\n"),
	}
	docs, err := LoadDocuments(fsys, "specs")
	require.NoError(t, err)
	want := []SourceDocument{
		{File: "specs/a-b.yaml", Index: 0, Data: []byte("a: dash sorts before slash\n"), Line: 1},
		{File: "specs/a/b.yaml", Index: 0, Data: []byte("a: in a directory\n"), Line: 1},
		{File: "specs/profiles/p.yaml", Index: 0, Data: []byte("# the profile\n" + profileDoc), Line: 1},
		{File: "specs/profiles/p.yaml", Index: 1, Data: []byte("\n" + requestDoc), Line: 10},
		{File: "specs/requests/r.yml", Index: 0, Data: []byte(requestDoc), Line: 1},
	}
	assert.Equal(t, want, docs)

	// The root of fsys as spec path.
	docs, err = LoadDocuments(fsys, ".")
	require.NoError(t, err)
	var files []string
	for _, d := range docs {
		files = append(files, d.File)
	}
	assert.Equal(t, []string{"outside.yaml", "specs/a-b.yaml", "specs/a/b.yaml", "specs/profiles/p.yaml", "specs/profiles/p.yaml", "specs/requests/r.yml"}, files)
}

// kustomizeRepo is a repository with a base, an overlay patching it with
// JSON 6902 and a resource file of its own.
func kustomizeRepo() fstest.MapFS {
	return fstest.MapFS{
		"base/kustomization.yaml": file("resources:\n- profile.yaml\n- request.yaml\n"),
		"base/profile.yaml":       file(profileDoc),
		"base/request.yaml":       file(requestDoc),
		"base/unrelated.yaml":     file("not: listed\n"),
		"overlays/b/kustomization.yaml": file(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../base
- extra.yaml
patches:
- path: deadline.yaml
  target: {kind: CertificationProfile, name: p}
- patch: |-
    - {op: add, path: /spec/count, value: 3}
  target: {kind: CertificationRequest}
`),
		"overlays/b/deadline.yaml": file("- {op: replace, path: /spec/checks/0/deadline, value: 900s}\n"),
		"overlays/b/extra.yaml":    file(strings.ReplaceAll(requestDoc, "name: r", "name: r2")),
		"bundles/x/run.sh":         file("#!/bin/sh\n"),
	}
}

func TestLoadDocumentsKustomize(t *testing.T) {
	docs, err := LoadDocuments(kustomizeRepo(), "overlays/b")
	require.NoError(t, err)
	require.Len(t, docs, 3)
	for i, d := range docs {
		assert.Equal(t, KustomizeFilePrefix+"overlays/b/kustomization.yaml", d.File)
		assert.Equal(t, i, d.Index)
	}
	assert.Contains(t, string(docs[0].Data), "deadline: 900s")
	assert.Contains(t, string(docs[0].Data), "kind: CertificationProfile")
	assert.Contains(t, string(docs[1].Data), "name: r\n")
	assert.Contains(t, string(docs[1].Data), "count: 3")
	assert.Contains(t, string(docs[2].Data), "name: r2")
	assert.Contains(t, string(docs[2].Data), "count: 3")

	// The base alone.
	docs, err = LoadDocuments(kustomizeRepo(), "base")
	require.NoError(t, err)
	require.Len(t, docs, 2)
	assert.Contains(t, string(docs[0].Data), "deadline: 60s")
	assert.Equal(t, KustomizeFilePrefix+"base/kustomization.yaml", docs[0].File)

	// An inline transformer is configuration, not a path.
	inline := fstest.MapFS{
		"k/kustomization.yaml": file("resources: [p.yaml]\ntransformers:\n- |\n  apiVersion: builtin\n  kind: LabelTransformer\n  metadata:\n    name: cluster\n  labels:\n    signet.dev/cluster: b\n  fieldSpecs:\n  - path: metadata/labels\n    create: true\n"),
		"k/p.yaml":             file(profileDoc),
	}
	docs, err = LoadDocuments(inline, "k")
	require.NoError(t, err)
	require.Len(t, docs, 1)
	assert.Contains(t, string(docs[0].Data), "signet.dev/cluster: b")

	// Other kustomization file names.
	for _, name := range []string{"kustomization.yml", "Kustomization"} {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{"k/" + name: file("resources: [p.yaml]\n"), "k/p.yaml": file(profileDoc)}
			docs, err := LoadDocuments(fsys, "k")
			require.NoError(t, err)
			require.Len(t, docs, 1)
			assert.Equal(t, KustomizeFilePrefix+"k/"+name, docs[0].File)
		})
	}
}

func TestLoadDocumentsExampleOverlay(t *testing.T) {
	root := os.DirFS("../examples/spec-repo")
	base, err := LoadDocuments(root, ".")
	require.NoError(t, err)
	overlay, err := LoadDocuments(root, "overlays/cluster-b")
	require.NoError(t, err)
	require.NotEmpty(t, base)
	require.NotEmpty(t, overlay)

	find := func(docs []SourceDocument, name string) string {
		for _, d := range docs {
			if bytes.Contains(d.Data, []byte("\n  name: "+name+"\n")) {
				return string(d.Data)
			}
		}
		t.Fatalf("no document named %s", name)
		return ""
	}
	b, o := find(base, "gpu-burnin"), find(overlay, "gpu-burnin")
	assert.Contains(t, b, "gpuCount: 8")
	assert.NotContains(t, o, "gpuCount: 8")
	assert.Contains(t, o, "gpuCount: 4")
	assert.Contains(t, b, "deadline: 1800s")
	assert.Contains(t, o, "deadline: 1500s")
	// The bundle pin is untouched by the overlay: bundle paths stay
	// relative to the repository root.
	assert.Contains(t, o, "path: bundles/gpu-burnin")
	n := find(overlay, "nccl-fabric")
	assert.Contains(t, n, "queue: gpu-certification-b")
}

// kustomizeAliasBomb expands to 9^9 strings.
const kustomizeAliasBomb = `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

func TestLoadDocumentsRefuses(t *testing.T) {
	withKustomization := func(k string, extra ...string) func(*testing.T) fs.FS {
		return func(*testing.T) fs.FS {
			m := fstest.MapFS{"spec/kustomization.yaml": file(k), "spec/p.yaml": file(profileDoc)}
			for i := 0; i+1 < len(extra); i += 2 {
				m[extra[i]] = file(extra[i+1])
			}
			return m
		}
	}
	onDisk := func(files map[string]string, links map[string]string) func(*testing.T) fs.FS {
		return func(t *testing.T) fs.FS {
			d := t.TempDir()
			writeTree(t, d, files)
			for link, target := range links {
				require.NoError(t, os.Symlink(target, filepath.Join(d, filepath.FromSlash(link))))
			}
			return os.DirFS(d)
		}
	}
	tests := []struct {
		name      string
		fsys      func(*testing.T) fs.FS
		dir       string
		wantErr   error
		wantFile  string
		wantEntry string
	}{
		{name: "https resource", fsys: withKustomization("resources:\n- https://example.invalid/p.yaml\n"), wantErr: ErrRemoteResource, wantEntry: `resources[0] "https://example.invalid/p.yaml"`},
		{name: "github ref", fsys: withKustomization("resources:\n- github.com/org/repo//path?ref=v1.0.0\n"), wantErr: ErrRemoteResource, wantEntry: "resources[0]"},
		{name: "github without subpath", fsys: withKustomization("resources:\n- github.com/org/repo\n"), wantErr: ErrRemoteResource, wantEntry: "resources[0]"},
		{name: "github even when a local dir has that name", fsys: withKustomization("resources:\n- github.com/org/repo\n", "spec/github.com/org/repo/kustomization.yaml", "resources: []\n"), wantErr: ErrRemoteResource, wantEntry: "resources[0]"},
		{name: "scp-style git", fsys: withKustomization("resources:\n- git@git.example:org/repo.git\n"), wantErr: ErrRemoteResource, wantEntry: "resources[0]"},
		{name: "ssh url", fsys: withKustomization("resources:\n- ssh://git@git.example/org/repo\n"), wantErr: ErrRemoteResource, wantEntry: "resources[0]"},
		{name: "file url", fsys: withKustomization("resources:\n- file:///etc/repo\n"), wantErr: ErrRemoteResource, wantEntry: "resources[0]"},
		{name: "git:: prefix", fsys: withKustomization("resources:\n- git::https://git.example/org/repo\n"), wantErr: ErrRemoteResource, wantEntry: "resources[0]"},
		{name: "query ref", fsys: withKustomization("resources:\n- p.yaml?ref=main\n"), wantErr: ErrRemoteResource, wantEntry: "resources[0]"},
		{name: "remote base", fsys: withKustomization("bases:\n- https://git.example/org/repo\n"), wantErr: ErrRemoteResource, wantEntry: "bases[0]"},
		{name: "remote component", fsys: withKustomization("resources: [p.yaml]\ncomponents:\n- github.com/org/repo/comp?ref=v1\n"), wantErr: ErrRemoteResource, wantEntry: "components[0]"},
		{name: "remote patch", fsys: withKustomization("resources: [p.yaml]\npatches:\n- path: https://example.invalid/patch.yaml\n"), wantErr: ErrRemoteResource, wantEntry: "patches[0].path"},
		{name: "remote strategic merge patch", fsys: withKustomization("resources: [p.yaml]\npatchesStrategicMerge:\n- https://example.invalid/patch.yaml\n"), wantErr: ErrRemoteResource, wantEntry: "patchesStrategicMerge[0]"},
		{name: "remote generator file", fsys: withKustomization("resources: [p.yaml]\nconfigMapGenerator:\n- name: c\n  files:\n  - key=https://example.invalid/f\n"), wantErr: ErrRemoteResource, wantEntry: "configMapGenerator[0].files[0]"},
		{name: "missing resource", fsys: withKustomization("resources:\n- nope.yaml\n"), wantErr: fs.ErrNotExist, wantEntry: `resources[0] "nope.yaml"`},
		{name: "escape the root", fsys: withKustomization("resources:\n- ../../outside\n"), wantErr: ErrEscapesRepo, wantEntry: `resources[0] "../../outside"`},
		{name: "escape from a base", fsys: withKustomization("resources:\n- ../base\n", "base/kustomization.yaml", "resources:\n- ../../../etc\n"), wantErr: ErrEscapesRepo, wantFile: "base/kustomization.yaml", wantEntry: "resources[0]"},
		{name: "escape by patch path", fsys: withKustomization("resources: [p.yaml]\npatches:\n- path: ../../x.yaml\n"), wantErr: ErrEscapesRepo, wantEntry: "patches[0].path"},
		{name: "absolute resource", fsys: withKustomization("resources:\n- /etc/passwd\n"), wantErr: ErrEscapesRepo, wantEntry: "resources[0]"},
		{name: "helm chart", fsys: withKustomization("helmCharts:\n- name: x\n  repo: https://charts.example\n"), wantErr: ErrHelmUnsupported, wantEntry: "helmCharts"},
		{name: "component is a file", fsys: withKustomization("resources: [p.yaml]\ncomponents: [p.yaml]\n"), wantEntry: "components[0]"},
		{name: "directory without kustomization", fsys: withKustomization("resources: [sub]\n", "spec/sub/x.yaml", "a: 1\n"), wantEntry: "resources[0]"},
		{name: "two kustomization files", fsys: withKustomization("resources: [p.yaml]\n", "spec/kustomization.yml", "resources: []\n"), wantFile: "spec"},
		{name: "alias bomb in a resource", fsys: withKustomization("resources: [bomb.yaml]\n", "spec/bomb.yaml", kustomizeAliasBomb), wantErr: ErrYAMLAlias, wantEntry: `resources[0] "bomb.yaml"`},
		{name: "alias in a patch", fsys: withKustomization("resources: [p.yaml]\npatches:\n- path: patch.yaml\n", "spec/patch.yaml", "- &op {op: add, path: /x, value: 1}\n- *op\n"), wantErr: ErrYAMLAlias, wantEntry: "patches[0].path"},
		{name: "alias bomb in the kustomization", fsys: withKustomization("resources: [p.yaml]\n" + kustomizeAliasBomb), wantErr: ErrYAMLAlias},
		{name: "cycle", fsys: withKustomization("resources: [p.yaml, ../other]\n", "other/kustomization.yaml", "resources: [../spec]\n")},
		{name: "unknown kustomization field", fsys: withKustomization("resources: [p.yaml]\nbogus: 1\n")},
		{name: "kustomize build failure", fsys: withKustomization("resources: [p.yaml, p.yaml]\n")},
		{
			name: "escape the repository root, on disk",
			fsys: func(t *testing.T) fs.FS {
				d := t.TempDir()
				writeTree(t, d, map[string]string{
					"repo/spec/kustomization.yaml": "resources: [../../outside]\n",
					"outside/kustomization.yaml":   "resources: [p.yaml]\n",
					"outside/p.yaml":               profileDoc,
				})
				return os.DirFS(filepath.Join(d, "repo"))
			},
			wantErr: ErrEscapesRepo, wantEntry: `resources[0] "../../outside"`,
		},
		{
			name:    "symlinked resource file",
			fsys:    onDisk(map[string]string{"spec/kustomization.yaml": "resources: [link.yaml]\n", "spec/p.yaml": profileDoc}, map[string]string{"spec/link.yaml": "p.yaml"}),
			wantErr: ErrSymlink, wantEntry: `resources[0] "link.yaml"`,
		},
		{
			name:    "symlinked resource pointing out of the repository",
			fsys:    onDisk(map[string]string{"spec/kustomization.yaml": "resources: [link.yaml]\n"}, map[string]string{"spec/link.yaml": "/etc/hostname"}),
			wantErr: ErrSymlink, wantEntry: `resources[0] "link.yaml"`,
		},
		{
			name:    "symlinked base directory",
			fsys:    onDisk(map[string]string{"spec/kustomization.yaml": "resources: [base]\n", "real/kustomization.yaml": "resources: [p.yaml]\n", "real/p.yaml": profileDoc}, map[string]string{"spec/base": "../real"}),
			wantErr: ErrSymlink, wantEntry: `resources[0] "base"`,
		},
		{
			name:    "symlinked patch",
			fsys:    onDisk(map[string]string{"spec/kustomization.yaml": "resources: [p.yaml]\npatches:\n- path: patch.yaml\n", "spec/p.yaml": profileDoc, "real-patch.yaml": "[]\n"}, map[string]string{"spec/patch.yaml": "../real-patch.yaml"}),
			wantErr: ErrSymlink, wantEntry: "patches[0].path",
		},
		{
			name:    "symlinked kustomization file",
			fsys:    onDisk(map[string]string{"spec/p.yaml": profileDoc, "real.yaml": "resources: [p.yaml]\n"}, map[string]string{"spec/kustomization.yaml": "../real.yaml"}),
			wantErr: ErrSymlink,
		},
		{
			name:     "symlink in plain discovery",
			fsys:     onDisk(map[string]string{"spec/p.yaml": profileDoc, "secret.yaml": "a: 1\n"}, map[string]string{"spec/q.yaml": "../secret.yaml"}),
			wantErr:  ErrSymlink,
			wantFile: "spec/q.yaml",
		},
		{
			name: "oversized file in plain discovery",
			fsys: func(*testing.T) fs.FS {
				return fstest.MapFS{"spec/big.yaml": file(strings.Repeat("#", MaxSpecFileBytes+1))}
			},
			wantErr:  ErrSpecFileTooBig,
			wantFile: "spec/big.yaml",
		},
		{
			name:      "oversized kustomize resource",
			fsys:      withKustomization("resources: [big.yaml]\n", "spec/big.yaml", strings.Repeat("#", MaxSpecFileBytes+1)),
			wantErr:   ErrSpecFileTooBig,
			wantEntry: "resources[0]",
		},
		{name: "missing spec path", fsys: withKustomization(""), dir: "nope", wantErr: fs.ErrNotExist, wantFile: "nope"},
		{name: "spec path escapes", fsys: withKustomization(""), dir: "../spec", wantErr: ErrEscapesRepo, wantFile: "../spec"},
		{name: "spec path is absolute", fsys: withKustomization(""), dir: "/spec", wantErr: ErrEscapesRepo, wantFile: "/spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir
			if dir == "" {
				dir = "spec"
			}
			docs, err := LoadDocuments(tt.fsys(t), dir)
			require.Error(t, err)
			assert.Nil(t, docs)
			var me *ManifestError
			require.True(t, errors.As(err, &me), "error %v is not a *ManifestError", err)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
			}
			wantFile := tt.wantFile
			if wantFile == "" {
				wantFile = "spec/kustomization.yaml"
			}
			assert.Equal(t, wantFile, me.File)
			assert.Contains(t, me.Entry, tt.wantEntry)
			assert.Contains(t, err.Error(), wantFile)
		})
	}
}

// TestLoadDocumentsOversizeBoundedMemory asserts that a 20 MB spec file,
// plain or named by a kustomization, is refused without being read: the
// bytes allocated stay far below its size.
func TestLoadDocumentsOversizeBoundedMemory(t *testing.T) {
	for name, kustomization := range map[string]string{"plain": "", "kustomize": "resources: [big.yaml]\n"} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(d, "spec"), 0o755))
			f, err := os.Create(filepath.Join(d, "spec", "big.yaml"))
			require.NoError(t, err)
			require.NoError(t, f.Truncate(20<<20))
			require.NoError(t, f.Close())
			if kustomization != "" {
				require.NoError(t, os.WriteFile(filepath.Join(d, "spec", "kustomization.yaml"), []byte(kustomization), 0o644))
			}
			fsys := os.DirFS(d)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err = LoadDocuments(fsys, "spec")
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, ErrSpecFileTooBig)
			assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated while refusing a 20 MB file")
		})
	}
}

func FuzzSplitDocuments(f *testing.F) {
	for _, s := range []string{"a: 1\n---\nb: 2\n", "--- |\n  x\n...\n", "---\r\n#c\n---", "", "....\n---x\n- ---\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs := SplitDocuments(data)
		total := 0
		for _, d := range docs {
			require.NotEmpty(t, d)
			require.False(t, blankYAML(d), "blank document returned: %q", d)
			require.True(t, bytes.Contains(data, d), "document %q is not a part of the input", d)
			for _, line := range bytes.Split(d, []byte("\n"))[1:] {
				require.False(t, isMarker(line, "---") || isMarker(line, "..."), "document %q holds a marker line", d)
			}
			total += len(d)
		}
		require.LessOrEqual(t, total, len(data))
	})
}

func FuzzLoadDocuments(f *testing.F) {
	f.Add([]byte("resources: [p.yaml]\n"), []byte(profileDoc), true)
	f.Add([]byte("resources: [../base]\npatches:\n- path: p.yaml\n"), []byte("- {op: add, path: /x, value: 1}\n"), true)
	f.Add([]byte("resources:\n- github.com/org/repo?ref=v1\n"), []byte(profileDoc+"---\n"+requestDoc), true)
	f.Add([]byte(""), []byte(profileDoc+"---\n"+requestDoc), false)
	f.Fuzz(func(t *testing.T, kustomization, doc []byte, withKustomization bool) {
		fsys := fstest.MapFS{
			"spec/p.yaml":             file(string(doc)),
			"base/kustomization.yaml": file("resources: [q.yaml]\n"),
			"base/q.yaml":             file(requestDoc),
		}
		if withKustomization {
			fsys["spec/kustomization.yaml"] = &fstest.MapFile{Data: kustomization}
		}
		docs, err := LoadDocuments(fsys, "spec")
		if err != nil {
			var me *ManifestError
			require.True(t, errors.As(err, &me), "error %v is not a *ManifestError", err)
			require.Nil(t, docs)
			return
		}
		for _, d := range docs {
			if withKustomization {
				require.Equal(t, KustomizeFilePrefix+"spec/kustomization.yaml", d.File)
			} else {
				require.Equal(t, "spec/p.yaml", d.File)
			}
			require.NotEmpty(t, d.Data)
		}
	})
}
