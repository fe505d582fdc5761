package ociimage_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/tools/ociimage"
)

// signetBin is the static signet binary, built once by TestMain as
// `make image` builds it (without -trimpath, which would rebuild every
// dependency outside the test build's cache).
var signetBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ociimage-test-")
	if err != nil {
		panic(err)
	}
	signetBin = filepath.Join(dir, "signet")
	cmd := exec.Command("go", "build", "-o", signetBin, "./cmd/signet")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic(fmt.Sprintf("CGO_ENABLED=0 go build ./cmd/signet: %v\n%s", err, b))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestBuildReadBack(t *testing.T) {
	bin := signetBin
	binBytes, err := os.ReadFile(bin)
	require.NoError(t, err)

	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	opts := ociimage.Options{RefName: "signet:test"}
	digestA, err := ociimage.Build(bin, dirA, opts)
	require.NoError(t, err)
	digestB, err := ociimage.Build(bin, dirB, opts)
	require.NoError(t, err)
	assert.Equal(t, digestA, digestB, "two builds of the same binary differ")

	// Rebuilding into the same layout leaves it naming one image.
	digestA2, err := ociimage.Build(bin, dirA, opts)
	require.NoError(t, err)
	assert.Equal(t, digestA, digestA2)

	p, err := layout.FromPath(dirA)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	desc := im.Manifests[0]
	assert.Equal(t, digestA, desc.Digest.String(), "index digest differs from Build's")
	assert.Equal(t, "signet:test", desc.Annotations[ociimage.RefNameAnnotation])
	assert.Equal(t, types.OCIManifestSchema1, desc.MediaType)
	require.NotNil(t, desc.Platform)
	assert.Equal(t, v1.Platform{OS: "linux", Architecture: "amd64"}, *desc.Platform)

	img, err := p.Image(desc.Digest)
	require.NoError(t, err)
	d, err := img.Digest()
	require.NoError(t, err)
	assert.Equal(t, digestA, d.String(), "manifest digest differs from Build's")

	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/signet"}, cf.Config.Entrypoint)
	assert.Empty(t, cf.Config.Cmd)
	assert.Equal(t, "65532:65532", cf.Config.User)
	assert.Equal(t, "linux", cf.OS)
	assert.Equal(t, "amd64", cf.Architecture)
	assert.True(t, cf.Created.Equal(time.Unix(0, 0)), "created %v", cf.Created)

	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	mt, err := layers[0].MediaType()
	require.NoError(t, err)
	assert.Equal(t, types.OCILayer, mt)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "signet", hdr.Name)
	assert.Equal(t, byte(tar.TypeReg), hdr.Typeflag)
	assert.Equal(t, int64(0o755), hdr.Mode)
	assert.Equal(t, 0, hdr.Uid)
	assert.Equal(t, 0, hdr.Gid)
	assert.True(t, hdr.ModTime.Equal(time.Unix(0, 0)), "mtime %v", hdr.ModTime)
	got, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(binBytes, got), "/signet in the layer differs from the binary (%d vs %d bytes)", len(got), len(binBytes))
	_, err = tr.Next()
	assert.Equal(t, io.EOF, err, "the layer holds more than /signet")

	// Another creation time is another image.
	other, err := ociimage.Build(bin, filepath.Join(t.TempDir(), "c"), ociimage.Options{Created: time.Unix(1700000000, 0)})
	require.NoError(t, err)
	assert.NotEqual(t, digestA, other)
}

func TestBuildRefuses(t *testing.T) {
	t.Run("dynamic binary", func(t *testing.T) {
		sh, err := exec.LookPath("sh")
		require.NoError(t, err)
		sh, err = filepath.EvalSymlinks(sh)
		require.NoError(t, err)
		_, err = ociimage.Build(sh, filepath.Join(t.TempDir(), "out"), ociimage.Options{})
		require.ErrorIs(t, err, ociimage.ErrNotStatic)
	})
	t.Run("not ELF", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "script")
		require.NoError(t, os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755))
		_, err := ociimage.Build(f, filepath.Join(t.TempDir(), "out"), ociimage.Options{})
		require.ErrorContains(t, err, "not an ELF executable")
	})
	t.Run("unrelated output directory", func(t *testing.T) {
		out := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(out, "keep.txt"), []byte("x"), 0o644))
		_, err := ociimage.Build(signetBin, out, ociimage.Options{})
		require.ErrorContains(t, err, "not an OCI image layout")
		_, err = os.Stat(filepath.Join(out, "index.json"))
		assert.ErrorIs(t, err, os.ErrNotExist, "Build wrote into an unrelated directory")
	})
}
