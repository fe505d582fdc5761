// Package gitfs presents a Git tree as an io/fs.FS, so that specs are
// rendered from a commit's tree and never from a working directory.
//
// Symlink entries are listed with fs.ModeSymlink and cannot be opened (the
// tree is not followed out of itself); submodule entries are listed as
// irregular files and cannot be opened either.
package gitfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// FS is a read-only file system over one Git tree. It is safe for
// concurrent use: go-git's tree objects are not (Tree.FindEntry fills a
// lookup map lazily), so every access to them is serialized.
type FS struct {
	mu    sync.Mutex
	root  *object.Tree
	mtime time.Time
	// dirs are the directories decoded so far, by path ("." the root),
	// each with its entries indexed by name: a lookup decodes no tree
	// twice (a directory of N files looked up once a file would decode
	// its tree N times).
	dirs map[string]*dirIndex
}

// dirIndex is a decoded directory and its entries by name.
type dirIndex struct {
	tree   *object.Tree
	byName map[string]int
}

func newDirIndex(t *object.Tree) *dirIndex {
	d := &dirIndex{tree: t, byName: make(map[string]int, len(t.Entries))}
	for i := range t.Entries {
		d.byName[t.Entries[i].Name] = i
	}
	return d
}

// dir returns the directory at p ("." the root), decoding it once. The
// caller holds f.mu.
func (f *FS) dir(p string) (*dirIndex, error) {
	if d, ok := f.dirs[p]; ok {
		return d, nil
	}
	if f.dirs == nil {
		f.dirs = map[string]*dirIndex{}
	}
	var t *object.Tree
	if p == "." {
		t = f.root
	} else {
		parent, err := f.dir(path.Dir(p))
		if err != nil {
			return nil, err
		}
		i, ok := parent.byName[path.Base(p)]
		if !ok || parent.tree.Entries[i].Mode != filemode.Dir {
			return nil, fs.ErrNotExist
		}
		if t, err = parent.tree.Tree(path.Base(p)); err != nil {
			return nil, err
		}
	}
	d := newDirIndex(t)
	f.dirs[p] = d
	return d, nil
}

var (
	_ fs.FS         = (*FS)(nil)
	_ fs.ReadDirFS  = (*FS)(nil)
	_ fs.ReadFileFS = (*FS)(nil)
	_ fs.StatFS     = (*FS)(nil)
	_ fs.ReadLinkFS = (*FS)(nil)
)

// FromCommit returns the tree of commit c as a file system.
func FromCommit(c *object.Commit) (*FS, error) {
	t, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("tree of commit %s: %w", c.Hash, err)
	}
	return &FS{root: t, mtime: c.Committer.When}, nil
}

// FromTree returns t as a file system.
func FromTree(t *object.Tree) *FS { return &FS{root: t} }

// entry resolves name to its tree entry; the root has a nil entry. The
// caller holds f.mu.
func (f *FS) entry(op, name string) (*object.TreeEntry, *object.Tree, error) {
	if !fs.ValidPath(name) {
		return nil, nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return nil, f.root, nil
	}
	d, err := f.dir(path.Dir(name))
	if err != nil {
		return nil, nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	i, ok := d.byName[path.Base(name)]
	if !ok {
		return nil, nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	e := &d.tree.Entries[i]
	if e.Mode == filemode.Dir {
		sub, err := f.dir(name)
		if err != nil {
			return nil, nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		return e, sub.tree, nil
	}
	return e, nil, nil
}

// Open opens a regular file or a directory. Symlinks and submodules are
// refused.
func (f *FS) Open(name string) (fs.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, t, err := f.entry("open", name)
	if err != nil {
		return nil, err
	}
	if t != nil {
		return &dir{fs: f, name: name, entry: e, tree: t}, nil
	}
	if e.Mode != filemode.Regular && e.Mode != filemode.Executable && e.Mode != filemode.Deprecated {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: a %s, not a regular file", fs.ErrInvalid, modeName(e.Mode))}
	}
	file, err := f.root.TreeEntryFile(e) // resolves by the entry's hash
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	b, err := readBlob(file)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &regular{info: info{name: path.Base(name), size: int64(len(b)), mode: modeOf(e.Mode), mtime: f.mtime}, Reader: bytes.NewReader(b)}, nil
}

func readBlob(file *object.File) ([]byte, error) {
	r, err := file.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// ReadFile returns the content of a regular file.
func (f *FS) ReadFile(name string) ([]byte, error) {
	file, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	if rf, ok := file.(*regular); ok {
		return io.ReadAll(rf.Reader)
	}
	return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
}

// ReadDir lists a directory, sorted by name; symlinks keep their type.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, t, err := f.entry("readdir", name)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	return f.dirEntries(t), nil
}

// Stat describes name without opening it (symlinks are not followed).
func (f *FS) Stat(name string) (fs.FileInfo, error) { return f.stat("stat", name) }

// Lstat is Stat: a tree never follows a symlink. With ReadLink it makes
// FS an fs.ReadLinkFS, so that fs.Lstat reads one entry instead of
// listing the parent directory (a listing per file made reading a
// directory of N spec files cost N² blob reads).
func (f *FS) Lstat(name string) (fs.FileInfo, error) { return f.stat("lstat", name) }

func (f *FS) stat(op, name string) (fs.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, _, err := f.entry(op, name)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return info{name: ".", mode: fs.ModeDir | 0o555, mtime: f.mtime}, nil
	}
	return f.entryInfo(e), nil
}

// ReadLink returns the target a symlink entry names (its blob).
func (f *FS) ReadLink(name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, _, err := f.entry("readlink", name)
	if err != nil {
		return "", err
	}
	if e == nil || e.Mode != filemode.Symlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fmt.Errorf("%w: not a symlink", fs.ErrInvalid)}
	}
	file, err := f.root.TreeEntryFile(e)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	b, err := readBlob(file)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return string(b), nil
}

// entryInfo describes e; a regular file's size is its blob's. The caller
// holds f.mu.
func (f *FS) entryInfo(e *object.TreeEntry) info {
	in := info{name: e.Name, mode: modeOf(e.Mode), mtime: f.mtime}
	if e.Mode == filemode.Regular || e.Mode == filemode.Executable {
		if obj, err := f.root.TreeEntryFile(e); err == nil {
			in.size = obj.Size
		}
	}
	return in
}

// dirEntries lists t; an entry reads its blob (for its size) only when
// its Info is asked for. The caller holds f.mu.
func (f *FS) dirEntries(t *object.Tree) []fs.DirEntry {
	out := make([]fs.DirEntry, 0, len(t.Entries))
	for i := range t.Entries {
		out = append(out, dirEntry{fs: f, e: t.Entries[i]})
	}
	return out
}

// dirEntry is a listed tree entry.
type dirEntry struct {
	fs *FS
	e  object.TreeEntry
}

func (d dirEntry) Name() string      { return d.e.Name }
func (d dirEntry) IsDir() bool       { return d.e.Mode == filemode.Dir }
func (d dirEntry) Type() fs.FileMode { return modeOf(d.e.Mode).Type() }
func (d dirEntry) String() string    { return fs.FormatDirEntry(d) }

func (d dirEntry) Info() (fs.FileInfo, error) {
	d.fs.mu.Lock()
	defer d.fs.mu.Unlock()
	return d.fs.entryInfo(&d.e), nil
}

func modeOf(m filemode.FileMode) fs.FileMode {
	switch m {
	case filemode.Dir:
		return fs.ModeDir | 0o555
	case filemode.Executable:
		return 0o555
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	case filemode.Submodule:
		return fs.ModeIrregular
	}
	return 0o444
}

func modeName(m filemode.FileMode) string {
	switch m {
	case filemode.Symlink:
		return "symlink"
	case filemode.Submodule:
		return "submodule"
	}
	return m.String()
}

type info struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.size }
func (i info) Mode() fs.FileMode  { return i.mode }
func (i info) ModTime() time.Time { return i.mtime }
func (i info) IsDir() bool        { return i.mode.IsDir() }
func (i info) Sys() any           { return nil }

type regular struct {
	info info
	*bytes.Reader
}

func (r *regular) Stat() (fs.FileInfo, error) { return r.info, nil }
func (r *regular) Close() error               { return nil }

type dir struct {
	fs    *FS
	name  string
	entry *object.TreeEntry
	tree  *object.Tree
	read  int
}

func (d *dir) Stat() (fs.FileInfo, error) {
	return info{name: path.Base(d.name), mode: fs.ModeDir | 0o555, mtime: d.fs.mtime}, nil
}
func (d *dir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: errors.New("is a directory")}
}
func (d *dir) Close() error { return nil }

// ReadDir implements fs.ReadDirFile.
func (d *dir) ReadDir(n int) ([]fs.DirEntry, error) {
	d.fs.mu.Lock()
	all := d.fs.dirEntries(d.tree)[d.read:]
	d.fs.mu.Unlock()
	if n <= 0 {
		d.read += len(all)
		return all, nil
	}
	if len(all) == 0 {
		return nil, io.EOF
	}
	if n > len(all) {
		n = len(all)
	}
	d.read += n
	return all[:n], nil
}
