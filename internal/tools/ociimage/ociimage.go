// Package ociimage builds signet's container image as an OCI image layout
// from the static signet binary alone: an image from scratch, one layer
// holding /signet, no base image and nothing downloaded (issue 6, deploy/).
// The same binary and Options always give the same image digest.
//
// It refuses a binary that could not run in an empty image (a dynamically
// linked or non-linux/amd64 ELF file) and an output directory that already
// holds something other than an OCI image layout.
package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed contents.
const (
	// Entrypoint is where the binary lies in the image and what runs.
	Entrypoint = "/signet"
	// User is the image's non-root user and group (deploy/base runs the
	// reconciler as 65532 too).
	User = "65532:65532"
	OS   = "linux"
	Arch = "amd64"
	// RefNameAnnotation names the image in the layout's index.json.
	RefNameAnnotation = "org.opencontainers.image.ref.name"
	// DefaultRefName is Options.RefName when empty.
	DefaultRefName = "signet:dev"
)

// ErrNotStatic is returned for a binary that needs a dynamic loader or
// shared libraries: an image from scratch has neither.
var ErrNotStatic = errors.New("not a statically linked executable")

// Options are what may vary between two builds of the same binary.
type Options struct {
	// RefName is the layout's org.opencontainers.image.ref.name for the
	// image (DefaultRefName when empty).
	RefName string
	// Created is the image's creation time and the binary's modification
	// time in the layer, truncated to seconds; zero means the Unix epoch,
	// so that a build is reproducible without it.
	Created time.Time
}

// Build writes an image holding binaryPath as /signet (mode 0755, owner
// 0:0, mtime Options.Created) with entrypoint ["/signet"], user User and
// platform linux/amd64 as an OCI image layout in outDir, and returns the
// image manifest's digest ("sha256:…"). outDir is created when missing; an
// existing layout there is rewritten so that its index names this image
// only, and blobs no longer referenced are removed. An outDir holding
// anything but a layout is refused, as is a binary that is not a static
// linux/amd64 ELF executable (ErrNotStatic for a dynamic one).
func Build(binaryPath, outDir string, o Options) (string, error) {
	bin, err := os.ReadFile(binaryPath)
	if err != nil {
		return "", err
	}
	if err := checkStatic(bin); err != nil {
		return "", fmt.Errorf("%s: %w", binaryPath, err)
	}
	if err := checkOutDir(outDir); err != nil {
		return "", err
	}
	created := time.Unix(0, 0).UTC()
	if !o.Created.IsZero() {
		created = o.Created.Truncate(time.Second).UTC()
	}
	ref := o.RefName
	if ref == "" {
		ref = DefaultRefName
	}

	img, err := image(bin, created)
	if err != nil {
		return "", fmt.Errorf("%s: %w", binaryPath, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	p, err := layout.Write(outDir, empty.Index)
	if err != nil {
		return "", fmt.Errorf("%s: %w", outDir, err)
	}
	if err := p.AppendImage(img,
		layout.WithAnnotations(map[string]string{RefNameAnnotation: ref}),
		layout.WithPlatform(v1.Platform{OS: OS, Architecture: Arch}),
	); err != nil {
		return "", fmt.Errorf("%s: %w", outDir, err)
	}
	stale, err := p.GarbageCollect()
	if err != nil {
		return "", fmt.Errorf("%s: %w", outDir, err)
	}
	for _, h := range stale {
		if err := p.RemoveBlob(h); err != nil {
			return "", fmt.Errorf("%s: %w", outDir, err)
		}
	}
	return digest.String(), nil
}

// image is the OCI image of bin: empty base, one gzip layer, fixed config.
func image(bin []byte, created time.Time) (v1.Image, error) {
	layerTar, err := tarOf(bin, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "signet ociimage: " + Entrypoint,
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS = OS
	cf.Architecture = Arch
	cf.Config.Entrypoint = []string{Entrypoint}
	cf.Config.Cmd = nil
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	return mutate.ConfigFile(img, cf)
}

// tarOf is a layer tar holding only bin as "signet", mode 0755, 0:0.
func tarOf(bin []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     Entrypoint[1:],
		Mode:     0o755,
		Size:     int64(len(bin)),
		ModTime:  mtime,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkStatic returns an error unless bin is a linux/amd64 ELF executable
// without an interpreter or needed shared libraries.
func checkStatic(bin []byte) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("ELF %v %v is not linux/amd64", f.Class, f.Machine)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("ELF type %v is not an executable", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%w: it has a program interpreter (build with CGO_ENABLED=0)", ErrNotStatic)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("ELF dynamic section: %w", err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("%w: it needs %v", ErrNotStatic, libs)
	}
	return nil
}

// checkOutDir refuses a directory that exists, is not empty and is not an
// OCI image layout, so that Build never writes into an unrelated tree.
func checkOutDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("%s: not empty and not an OCI image layout (no oci-layout file)", dir)
	}
	return nil
}
