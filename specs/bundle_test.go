package specs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coreutilsBundleDigest runs DESIGN §3's pipeline, verbatim, on dir.
func coreutilsBundleDigest(t *testing.T, dir string) Digest {
	t.Helper()
	cmd := exec.Command("sh", "-c", `cd "$1" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum`, "sh", dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "coreutils pipeline: %s", out)
	hex, rest, ok := strings.Cut(strings.TrimSpace(string(out)), "  ")
	require.True(t, ok, "unexpected sha256sum output %q", out)
	require.Equal(t, "-", rest)
	d, err := ParseDigest("sha256:" + hex)
	require.NoError(t, err)
	return d
}

// writeTree creates files (path → content) under root, making parents.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
}

// awkwardBundle has names that trip naive implementations: spaces,
// non-ASCII, names whose bytewise order differs from per-directory walk
// order and from locale order, nested directories and an empty file.
var awkwardBundle = map[string]string{
	"run check.sh":           "#!/bin/sh\necho 'space in name'\n",
	"é.txt":                  "accent\n",
	"日本/データ.txt":             "nihongo\n",
	"a/b":                    "walk order puts a/ before a-b, bytewise sorts a-b first\n",
	"a-b":                    "dash\n",
	"a b/c":                  "space sorts before slash\n",
	"B":                      "uppercase sorts before lowercase bytewise, not in en_US\n",
	"_under":                 "underscore\n",
	"deep/er/still/deeper/x": "nested\n",
	"empty":                  "",
	"tab\there":              "tab in name\n",
	"lib/-dash-inside.sh":    "leading dash is fine below the bundle root\n",
}

func TestBundleDigestMatchesCoreutils(t *testing.T) {
	awkward := t.TempDir()
	writeTree(t, awkward, awkwardBundle)
	require.NoError(t, os.MkdirAll(filepath.Join(awkward, "empty-dir", "nested"), 0o755))

	dirs := map[string]string{"awkward": awkward}
	examples, err := filepath.Glob("../examples/spec-repo/bundles/*")
	require.NoError(t, err)
	require.NotEmpty(t, examples, "no example bundles found")
	for _, e := range examples {
		dirs["example "+filepath.Base(e)] = e
	}

	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			want := coreutilsBundleDigest(t, dir)

			got, files, err := BundleDigest(os.DirFS(dir), ".")
			require.NoError(t, err)
			assert.Equal(t, want, got)

			// The same bundle addressed as a subdirectory of a larger tree.
			got2, files2, err := BundleDigest(os.DirFS(filepath.Dir(dir)), filepath.Base(dir))
			require.NoError(t, err)
			assert.Equal(t, want, got2)
			assert.Equal(t, files, files2)

			// The listing is the sha256sum listing: sorted bytewise, per-file
			// digests and sizes of the bytes on disk.
			var listing strings.Builder
			for i, f := range files {
				if i > 0 {
					assert.Less(t, files[i-1].Path, f.Path, "listing not sorted bytewise")
				}
				b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
				require.NoError(t, err)
				assert.Equal(t, DigestOf(b), f.Digest, f.Path)
				assert.Equal(t, int64(len(b)), f.Size, f.Path)
				fmt.Fprintf(&listing, "%s  %s\n", f.Digest.Hex(), f.Path)
			}
			assert.Equal(t, want, DigestOf([]byte(listing.String())))
		})
	}
}

func TestBundleDigestAwkwardOrder(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, awkwardBundle)
	_, files, err := BundleDigest(os.DirFS(dir), ".")
	require.NoError(t, err)
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	assert.Equal(t, []string{
		"B", "_under", "a b/c", "a-b", "a/b", "deep/er/still/deeper/x", "empty",
		"lib/-dash-inside.sh", "run check.sh", "tab\there", "é.txt", "日本/データ.txt",
	}, paths)
	for _, f := range files {
		if f.Path == "empty" {
			assert.Equal(t, Digest("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), f.Digest)
			assert.Zero(t, f.Size)
		}
	}
}

// TestBundleDigestChangesWithContent asserts that the digest covers bytes,
// names and the presence of every file.
func TestBundleDigestChangesWithContent(t *testing.T) {
	base := fstest.MapFS{
		"b/x.sh":     {Data: []byte("echo x\n")},
		"b/lib/y.sh": {Data: []byte("echo y\n")},
	}
	d0, _, err := BundleDigest(base, "b")
	require.NoError(t, err)
	for name, fsys := range map[string]fstest.MapFS{
		"content":    {"b/x.sh": {Data: []byte("echo X\n")}, "b/lib/y.sh": {Data: []byte("echo y\n")}},
		"rename":     {"b/z.sh": {Data: []byte("echo x\n")}, "b/lib/y.sh": {Data: []byte("echo y\n")}},
		"added file": {"b/x.sh": {Data: []byte("echo x\n")}, "b/lib/y.sh": {Data: []byte("echo y\n")}, "b/new": {}},
		"move dir":   {"b/x.sh": {Data: []byte("echo x\n")}, "b/lib2/y.sh": {Data: []byte("echo y\n")}},
	} {
		t.Run(name, func(t *testing.T) {
			d, _, err := BundleDigest(fsys, "b")
			require.NoError(t, err)
			assert.NotEqual(t, d0, d)
		})
	}
	// A file outside the bundle does not count.
	base["other/z"] = &fstest.MapFile{Data: []byte("z")}
	d1, _, err := BundleDigest(base, "b")
	require.NoError(t, err)
	assert.Equal(t, d0, d1)
}

// TestBundleListingDigest: the aggregate recomputed from a listing alone is
// BundleDigest's (and coreutils'), and a listing BundleDigest could never
// return (unordered, repeated, empty, an escaped or dashed name, a bad
// digest) is refused rather than hashed.
func TestBundleListingDigest(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, awkwardBundle)
	want, files, err := BundleDigest(os.DirFS(dir), ".")
	require.NoError(t, err)
	got, err := BundleListingDigest(files)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, coreutilsBundleDigest(t, dir), got)

	d := DigestOf([]byte("x"))
	for _, tc := range []struct {
		name  string
		files []BundleFile
		want  string
	}{
		{"empty", nil, "holds no regular file"},
		{"unordered", []BundleFile{{Path: "b", Digest: d}, {Path: "a", Digest: d}}, `files[1]: path "a" is not after "b"`},
		{"repeated", []BundleFile{{Path: "a", Digest: d}, {Path: "a", Digest: d}}, `files[1]: path "a" is not after "a"`},
		{"newline", []BundleFile{{Path: "a\n" + d.Hex() + "  b", Digest: d}}, "files[0]: path"},
		{"backslash", []BundleFile{{Path: `a\b`, Digest: d}}, "sha256sum cannot list verbatim"},
		{"leading dash", []BundleFile{{Path: "-n", Digest: d}}, "sha256sum cannot list verbatim"},
		{"absolute", []BundleFile{{Path: "/etc/x", Digest: d}}, "files[0]: path"},
		{"dot dot", []BundleFile{{Path: "../x", Digest: d}}, "files[0]: path"},
		{"bare hex digest", []BundleFile{{Path: "a", Digest: Digest(d.Hex())}}, "files[0]: digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BundleListingDigest(tc.files)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestBundleDigestRejects(t *testing.T) {
	regular := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s), Mode: 0o644} }
	tests := []struct {
		name     string
		fsys     func(t *testing.T) fs.FS
		dir      string
		wantErr  error
		wantPath string
	}{
		{
			name: "symlink to a file",
			fsys: func(t *testing.T) fs.FS {
				d := t.TempDir()
				writeTree(t, d, map[string]string{"b/ok.sh": "x", "target": "secret"})
				require.NoError(t, os.Symlink("../target", filepath.Join(d, "b", "link.sh")))
				return os.DirFS(d)
			},
			dir: "b", wantErr: ErrBundleSymlink, wantPath: "b/link.sh",
		},
		{
			name: "symlink to a directory",
			fsys: func(t *testing.T) fs.FS {
				d := t.TempDir()
				writeTree(t, d, map[string]string{"b/ok.sh": "x", "elsewhere/f": "y"})
				require.NoError(t, os.Symlink("../elsewhere", filepath.Join(d, "b", "lib")))
				return os.DirFS(d)
			},
			dir: "b", wantErr: ErrBundleSymlink, wantPath: "b/lib",
		},
		{
			name: "dangling symlink",
			fsys: func(t *testing.T) fs.FS {
				d := t.TempDir()
				writeTree(t, d, map[string]string{"b/ok.sh": "x"})
				require.NoError(t, os.Symlink("/nonexistent", filepath.Join(d, "b", "gone")))
				return os.DirFS(d)
			},
			dir: "b", wantErr: ErrBundleSymlink, wantPath: "b/gone",
		},
		{
			name: "bundle directory is a symlink",
			fsys: func(t *testing.T) fs.FS {
				d := t.TempDir()
				writeTree(t, d, map[string]string{"real/ok.sh": "x"})
				require.NoError(t, os.Symlink("real", filepath.Join(d, "b")))
				return os.DirFS(d)
			},
			dir: "b", wantErr: ErrBundleSymlink, wantPath: "b",
		},
		{
			name: "parent of the bundle is a symlink",
			fsys: func(t *testing.T) fs.FS {
				d := t.TempDir()
				writeTree(t, d, map[string]string{"real/b/ok.sh": "x"})
				require.NoError(t, os.Symlink("real", filepath.Join(d, "bundles")))
				return os.DirFS(d)
			},
			dir: "bundles/b", wantErr: ErrBundleSymlink, wantPath: "bundles",
		},
		{
			name: "symlink through a wrapper without ReadLinkFS",
			fsys: func(t *testing.T) fs.FS {
				d := t.TempDir()
				writeTree(t, d, map[string]string{"real/ok.sh": "x"})
				require.NoError(t, os.Symlink("real", filepath.Join(d, "b")))
				return plainFS{os.DirFS(d)}
			},
			dir: "b", wantErr: ErrBundleSymlink, wantPath: "b",
		},
		{
			name: "fifo",
			fsys: func(t *testing.T) fs.FS {
				d := t.TempDir()
				writeTree(t, d, map[string]string{"b/ok.sh": "x"})
				require.NoError(t, syscall.Mkfifo(filepath.Join(d, "b", "pipe"), 0o644))
				return os.DirFS(d)
			},
			dir: "b", wantErr: ErrBundleIrregular, wantPath: "b/pipe",
		},
		{
			name: "device",
			fsys: func(*testing.T) fs.FS {
				return fstest.MapFS{"b/ok.sh": regular("x"), "b/null": {Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666}}
			},
			dir: "b", wantErr: ErrBundleIrregular, wantPath: "b/null",
		},
		{
			name: "socket",
			fsys: func(*testing.T) fs.FS {
				return fstest.MapFS{"b/ok.sh": regular("x"), "b/sock": {Mode: fs.ModeSocket}}
			},
			dir: "b", wantErr: ErrBundleIrregular, wantPath: "b/sock",
		},
		{
			name: "symlink in a Git-tree-like fs",
			fsys: func(*testing.T) fs.FS {
				return fstest.MapFS{"b/ok.sh": regular("x"), "b/l": {Mode: fs.ModeSymlink, Data: []byte("ok.sh")}}
			},
			dir: "b", wantErr: ErrBundleSymlink, wantPath: "b/l",
		},
		{name: "escape with ..", fsys: mapBundle, dir: "../b", wantErr: ErrBundleEscape, wantPath: "../b"},
		{name: "escape inside the path", fsys: mapBundle, dir: "b/../../etc", wantErr: ErrBundleEscape, wantPath: "b/../../etc"},
		{name: "absolute path", fsys: mapBundle, dir: "/etc", wantErr: ErrBundleEscape, wantPath: "/etc"},
		{name: "trailing slash", fsys: mapBundle, dir: "b/", wantErr: ErrBundleEscape, wantPath: "b/"},
		{name: "missing directory", fsys: mapBundle, dir: "nope", wantErr: fs.ErrNotExist, wantPath: "nope"},
		{name: "file, not directory", fsys: mapBundle, dir: "b/ok.sh", wantPath: "b/ok.sh"},
		{
			name: "empty bundle",
			fsys: func(*testing.T) fs.FS { return fstest.MapFS{"b/sub": {Mode: fs.ModeDir | 0o755}} },
			dir:  "b", wantErr: ErrBundleEmpty, wantPath: "b",
		},
		{name: "backslash in name", fsys: withFile(`a\b`), dir: "b", wantErr: ErrBundleName, wantPath: `b/a\b`},
		{name: "newline in name", fsys: withFile("a\nb"), dir: "b", wantErr: ErrBundleName, wantPath: "b/a\nb"},
		{name: "carriage return in name", fsys: withFile("a\rb"), dir: "b", wantErr: ErrBundleName, wantPath: "b/a\rb"},
		{name: "leading dash at the root", fsys: withFile("-n"), dir: "b", wantErr: ErrBundleName, wantPath: "b/-n"},
		{name: "invalid UTF-8 name", fsys: withFile("a\xffb"), dir: "b", wantErr: ErrBundleName, wantPath: "b/a\xffb"},
		{
			name: "too many files",
			fsys: func(*testing.T) fs.FS {
				m := fstest.MapFS{}
				for i := range MaxBundleFiles + 1 {
					m[fmt.Sprintf("b/f%05d", i)] = regular("")
				}
				return m
			},
			dir: "b", wantErr: ErrBundleTooLarge, wantPath: "b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, files, err := BundleDigest(tt.fsys(t), tt.dir)
			require.Error(t, err)
			assert.Empty(t, d)
			assert.Nil(t, files)
			var be *BundleError
			require.True(t, errors.As(err, &be), "error %v is not a *BundleError", err)
			assert.Equal(t, tt.wantPath, be.Path)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
			}
			assert.Contains(t, err.Error(), tt.wantPath, "the error names the path")
		})
	}
}

func mapBundle(*testing.T) fs.FS {
	return fstest.MapFS{"b/ok.sh": {Data: []byte("x")}}
}

func withFile(name string) func(*testing.T) fs.FS {
	return func(*testing.T) fs.FS {
		return fstest.MapFS{"b/ok.sh": {Data: []byte("x")}, "b/" + name: {Data: []byte("y")}}
	}
}

// plainFS hides every interface of the wrapped fs but fs.FS and
// fs.ReadDirFS, as a careless wrapper would (no fs.ReadLinkFS).
type plainFS struct{ fsys fs.FS }

func (p plainFS) Open(name string) (fs.File, error)          { return p.fsys.Open(name) }
func (p plainFS) ReadDir(name string) ([]fs.DirEntry, error) { return fs.ReadDir(p.fsys, name) }

// TestExampleBundlePins checks that every example profile pins the real
// digest of its bundle, as computed both here and by coreutils.
func TestExampleBundlePins(t *testing.T) {
	root := "../examples/spec-repo"
	docs, err := LoadDocuments(os.DirFS(root), "profiles")
	require.NoError(t, err)
	pins := 0
	for _, doc := range docs {
		var bundlePath, pin string
		for _, line := range strings.Split(string(doc.Data), "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "path: bundles/"); ok {
				bundlePath = "bundles/" + v
			}
			if v, ok := strings.CutPrefix(line, "digest: "); ok {
				pin = v
			}
		}
		if bundlePath == "" {
			continue
		}
		t.Run(bundlePath, func(t *testing.T) {
			got, _, err := BundleDigest(os.DirFS(root), bundlePath)
			require.NoError(t, err)
			assert.Equal(t, pin, got.String(), "%s#%d pins a stale digest", doc.File, doc.Index)
			assert.Equal(t, coreutilsBundleDigest(t, filepath.Join(root, bundlePath)), got)
		})
		pins++
	}
	assert.Equal(t, 3, pins, "example profiles with a bundle")
}

// FuzzBundleDigest builds bundles from fuzzed names and checks that every
// accepted bundle's digest is the sha256 of its sha256sum listing, sorted
// bytewise, and that no accepted name is one sha256sum would escape.
func FuzzBundleDigest(f *testing.F) {
	f.Add("run.sh", "lib/x y.sh", []byte("echo\n"))
	f.Add("a-b", "a/b", []byte(""))
	f.Add("é", "日本/x", []byte("x"))
	f.Add(`a\b`, "-x", []byte("x"))
	f.Fuzz(func(t *testing.T, name1, name2 string, data []byte) {
		m := fstest.MapFS{}
		for _, n := range []string{name1, name2} {
			if fs.ValidPath("b/"+n) && n != "." {
				m["b/"+n] = &fstest.MapFile{Data: data}
			}
		}
		if len(m) == 0 {
			return
		}
		d, files, err := BundleDigest(m, "b")
		if err != nil {
			var be *BundleError
			require.True(t, errors.As(err, &be), "error %v is not a *BundleError", err)
			return
		}
		var listing strings.Builder
		for i, f := range files {
			if i > 0 {
				require.Less(t, files[i-1].Path, f.Path)
			}
			require.False(t, strings.ContainsAny(f.Path, "\\\n\r"), "accepted %q", f.Path)
			require.False(t, strings.HasPrefix(f.Path, "-"), "accepted %q", f.Path)
			fmt.Fprintf(&listing, "%s  %s\n", f.Digest.Hex(), f.Path)
		}
		require.Equal(t, DigestOf([]byte(listing.String())), d)
	})
}
