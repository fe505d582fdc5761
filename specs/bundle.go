package specs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds on one bundle. A pod or mpijob bundle must also fit a ConfigMap,
// which validation checks against the sizes BundleDigest returns.
const (
	// MaxBundleFiles is the most regular files one bundle may hold.
	MaxBundleFiles = 10000
	// MaxBundleBytes is the most bytes all files of one bundle may hold
	// together.
	MaxBundleBytes int64 = 256 << 20
)

// BundleFile is one regular file of a bundle: its path relative to the
// bundle root ("/"-separated, as find -printf '%P' prints it) and the sha256
// of its bytes.
type BundleFile struct {
	Path   string `json:"path"`
	Digest Digest `json:"digest"`
	Size   int64  `json:"size"`
}

// BundleError says why a bundle cannot be digested: Path is the offending
// path inside fsys (the bundle directory itself or one of its entries).
type BundleError struct {
	Path string
	Err  error
}

func (e *BundleError) Error() string { return fmt.Sprintf("bundle %s: %v", e.Path, e.Err) }
func (e *BundleError) Unwrap() error { return e.Err }

// Reasons a bundle is refused; test with errors.Is.
var (
	ErrBundleSymlink   = errors.New("is a symlink; bundles hold regular files and directories only")
	ErrBundleIrregular = errors.New("is not a regular file or directory")
	ErrBundleEscape    = errors.New("is not a relative path inside the repository")
	ErrBundleName      = errors.New("has a name sha256sum cannot list verbatim (a backslash, CR or LF, or a leading '-') or that is not UTF-8")
	ErrBundleEmpty     = errors.New("holds no regular file")
	ErrBundleTooLarge  = errors.New("is too large")
)

// BundleDigest computes the aggregate digest of directory dir of fsys
// exactly as DESIGN §3's pipeline does:
//
//	cd BUNDLE && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum
//
// that is, the sha256 of the sha256sum listing ("<hex>  <path>\n") of every
// regular file below dir, sorted bytewise by path. It also returns that
// listing as BundleFiles in the same order. Empty directories contribute
// nothing, as with find -type f.
//
// dir is a slash-separated path relative to the root of fsys (fs.ValidPath);
// "..", absolute paths and paths through a symlink are refused. Inside the
// bundle, symlinks (to files or directories), devices, fifos, sockets, names
// holding a backslash, CR or LF (which sha256sum would escape), a
// top-level name starting with "-" (which sha256sum would take for an
// option), names that are not UTF-8, an empty bundle and one over MaxBundleFiles or MaxBundleBytes are
// all refused with a *BundleError naming the path. Symlinks are detected
// with fs.ReadDir entry types and fs.Lstat, never followed.
func BundleDigest(fsys fs.FS, dir string) (Digest, []BundleFile, error) {
	if err := checkRepoDir(fsys, dir); err != nil {
		return "", nil, err
	}
	var names []string
	var total int64
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &BundleError{Path: p, Err: err}
		}
		if p == dir {
			return nil
		}
		rel := strings.TrimPrefix(p, dir+"/")
		if dir == "." {
			rel = p
		}
		if strings.ContainsAny(d.Name(), "\\\n\r") || !utf8.ValidString(d.Name()) || strings.HasPrefix(rel, "-") {
			return &BundleError{Path: p, Err: fmt.Errorf("%q %w", d.Name(), ErrBundleName)}
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			return &BundleError{Path: p, Err: ErrBundleSymlink}
		case t.IsDir():
			return nil
		case !t.IsRegular():
			return &BundleError{Path: p, Err: fmt.Errorf("%w (mode %v)", ErrBundleIrregular, t)}
		}
		// A DirEntry type of 0 may come from a file system that does not
		// know the type without a stat; confirm with the entry's Info.
		info, err := d.Info()
		if err != nil {
			return &BundleError{Path: p, Err: err}
		}
		if !info.Mode().IsRegular() {
			return &BundleError{Path: p, Err: fmt.Errorf("%w (mode %v)", ErrBundleIrregular, info.Mode().Type())}
		}
		names = append(names, rel)
		total += info.Size()
		if len(names) > MaxBundleFiles {
			return &BundleError{Path: dir, Err: fmt.Errorf("%w: more than %d files", ErrBundleTooLarge, MaxBundleFiles)}
		}
		if total > MaxBundleBytes {
			return &BundleError{Path: dir, Err: fmt.Errorf("%w: more than %d bytes", ErrBundleTooLarge, MaxBundleBytes)}
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	if len(names) == 0 {
		return "", nil, &BundleError{Path: dir, Err: ErrBundleEmpty}
	}
	// LC_ALL=C sort: bytewise order of the whole relative path.
	sort.Strings(names)

	files := make([]BundleFile, 0, len(names))
	for _, rel := range names {
		full := path.Join(dir, rel)
		sum, size, err := hashRegularFile(fsys, full)
		if err != nil {
			return "", nil, err
		}
		files = append(files, BundleFile{Path: rel, Digest: Digest("sha256:" + hex.EncodeToString(sum)), Size: size})
	}
	agg, err := BundleListingDigest(files)
	if err != nil {
		return "", nil, &BundleError{Path: dir, Err: err}
	}
	return agg, files, nil
}

// BundleListingDigest returns the aggregate digest of a bundle from its
// listing alone (DESIGN §3): the sha256 of the sha256sum lines
// "<hex>  <path>\n" of files, in the order given; Size is ignored. It is
// the one implementation of the aggregate: BundleDigest hashes a
// directory's listing with it, and the auditor recomputes an admission's
// bundle digest from the file list the admission records.
//
// files must be a listing BundleDigest could return: not empty, at most
// MaxBundleFiles entries in strictly increasing bytewise path order, each
// path a valid relative path (fs.ValidPath) that sha256sum lists verbatim
// and each digest a sha256. Anything else is refused with an error naming
// the first entry at fault, so that no two listings hash alike.
func BundleListingDigest(files []BundleFile) (Digest, error) {
	switch {
	case len(files) == 0:
		return "", ErrBundleEmpty
	case len(files) > MaxBundleFiles:
		return "", fmt.Errorf("%w: more than %d files", ErrBundleTooLarge, MaxBundleFiles)
	}
	agg := sha256.New()
	for i, f := range files {
		if !fs.ValidPath(f.Path) || f.Path == "." || strings.ContainsAny(f.Path, "\\\n\r") || !utf8.ValidString(f.Path) || strings.HasPrefix(f.Path, "-") {
			return "", fmt.Errorf("files[%d]: path %q %w", i, f.Path, ErrBundleName)
		}
		if i > 0 && f.Path <= files[i-1].Path {
			return "", fmt.Errorf("files[%d]: path %q is not after %q in bytewise order", i, f.Path, files[i-1].Path)
		}
		if _, err := ParseDigest(string(f.Digest)); err != nil {
			return "", fmt.Errorf("files[%d]: digest: %w", i, err)
		}
		fmt.Fprintf(agg, "%s  %s\n", f.Digest.Hex(), f.Path)
	}
	return Digest("sha256:" + hex.EncodeToString(agg.Sum(nil))), nil
}

// hashRegularFile returns the sha256 and size of name, which the walk found
// to be a regular file, refusing it unless the opened file is one too and,
// where fsys can tell (fs.ReadLinkFS), it has not become a symlink since.
func hashRegularFile(fsys fs.FS, name string) ([]byte, int64, error) {
	if _, ok := fsys.(fs.ReadLinkFS); ok {
		li, err := fs.Lstat(fsys, name)
		if err != nil {
			return nil, 0, &BundleError{Path: name, Err: err}
		}
		if li.Mode()&fs.ModeSymlink != 0 {
			return nil, 0, &BundleError{Path: name, Err: ErrBundleSymlink}
		}
		if !li.Mode().IsRegular() {
			return nil, 0, &BundleError{Path: name, Err: ErrBundleIrregular}
		}
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, 0, &BundleError{Path: name, Err: err}
	}
	defer f.Close()
	oi, err := f.Stat()
	if err != nil {
		return nil, 0, &BundleError{Path: name, Err: err}
	}
	if !oi.Mode().IsRegular() {
		return nil, 0, &BundleError{Path: name, Err: ErrBundleIrregular}
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, MaxBundleBytes+1))
	if err != nil {
		return nil, 0, &BundleError{Path: name, Err: err}
	}
	if n > MaxBundleBytes {
		return nil, 0, &BundleError{Path: name, Err: fmt.Errorf("%w: more than %d bytes", ErrBundleTooLarge, MaxBundleBytes)}
	}
	return h.Sum(nil), n, nil
}

// checkRepoDir refuses dir unless it is a valid relative path of fsys that
// names a directory reached without passing through a symlink.
func checkRepoDir(fsys fs.FS, dir string) error {
	if !fs.ValidPath(dir) {
		return &BundleError{Path: dir, Err: ErrBundleEscape}
	}
	if err := checkNoSymlink(fsys, dir); err != nil {
		return err
	}
	info, err := fs.Stat(fsys, dir)
	if err != nil {
		return &BundleError{Path: dir, Err: err}
	}
	if !info.IsDir() {
		return &BundleError{Path: dir, Err: errors.New("is not a directory")}
	}
	return nil
}

// checkNoSymlink refuses p when p or any directory above it inside fsys is
// a symlink (as fs.Lstat reports it).
func checkNoSymlink(fsys fs.FS, p string) error {
	if p == "." {
		return nil
	}
	parts := strings.Split(p, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		info, err := lstat(fsys, sub)
		if err != nil {
			return &BundleError{Path: sub, Err: err}
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return &BundleError{Path: sub, Err: ErrBundleSymlink}
		}
	}
	return nil
}

// lstat is fs.Lstat that never follows a symlink, even when fsys (say, a
// wrapper around os.DirFS) does not implement fs.ReadLinkFS: then the
// entry's type is taken from its parent directory's listing, which
// os.DirFS and Git tree filesystems report without following links.
func lstat(fsys fs.FS, name string) (fs.FileInfo, error) {
	if _, ok := fsys.(fs.ReadLinkFS); ok || name == "." {
		return fs.Lstat(fsys, name)
	}
	entries, err := fs.ReadDir(fsys, path.Dir(name))
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	base := path.Base(name)
	i, found := sort.Find(len(entries), func(i int) int { return strings.Compare(base, entries[i].Name()) })
	if !found {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	e := entries[i]
	if e.Type()&fs.ModeSymlink != 0 {
		return symlinkInfo{name: base}, nil
	}
	return e.Info()
}

// symlinkInfo describes a symlink found in a directory listing.
type symlinkInfo struct{ name string }

func (s symlinkInfo) Name() string       { return s.name }
func (s symlinkInfo) Size() int64        { return 0 }
func (s symlinkInfo) Mode() fs.FileMode  { return fs.ModeSymlink }
func (s symlinkInfo) ModTime() time.Time { return time.Time{} }
func (s symlinkInfo) IsDir() bool        { return false }
func (s symlinkInfo) Sys() any           { return nil }
