package pagetable

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Store keeps pages by the hex SHA-256 of their bytes. It does not check
// that a page hashes to its name: Table does, on every read.
type Store interface {
	// Get returns the page stored under digest, or an error wrapping
	// os.ErrNotExist when there is none.
	Get(digest string) ([]byte, error)
	// Put stores data under digest, which the caller computed. Putting a
	// digest already present does nothing. Put does not keep data.
	Put(digest string, data []byte) error
}

// DirStore keeps each page in the file <Dir>/<digest>, mode 0600.
type DirStore struct{ Dir string }

var (
	_ Store = (*DirStore)(nil)
	_ Store = (*MemStore)(nil)
)

// NewDirStore returns the store in dir, creating dir (mode 0700) if it is
// missing.
func NewDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pagetable: creating store: %w", err)
	}
	return &DirStore{Dir: dir}, nil
}

// Get reads the file of digest; a missing file is an *fs.PathError
// wrapping os.ErrNotExist.
func (s *DirStore) Get(digest string) ([]byte, error) {
	if err := checkDigest(digest); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(s.Dir, digest))
}

// Put writes data to a temporary file in Dir, syncs it and renames it to
// digest. It does nothing when the file of digest exists, whatever it
// holds.
func (s *DirStore) Put(digest string, data []byte) (err error) {
	if err := checkDigest(digest); err != nil {
		return err
	}
	path := filepath.Join(s.Dir, digest)
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	f, err := os.CreateTemp(s.Dir, ".put-*") // mode 0600
	if err != nil {
		return fmt.Errorf("pagetable: writing page %s: %w", digest, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("pagetable: writing page %s: %w", digest, err)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Sync makes the pages put so far durable: Put syncs each page's file,
// Sync the directory that names them. Call it before writing what lists
// them.
func (s *DirStore) Sync() error {
	d, err := os.Open(s.Dir)
	if err != nil {
		return fmt.Errorf("pagetable: syncing store: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("pagetable: syncing store %s: %w", s.Dir, err)
	}
	return nil
}

// MemStore keeps pages in memory. It is safe for concurrent use.
type MemStore struct {
	mu    sync.RWMutex
	pages map[string][]byte
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{pages: map[string][]byte{}} }

// Get returns a copy of the page of digest, or an error wrapping
// os.ErrNotExist.
func (s *MemStore) Get(digest string) ([]byte, error) {
	s.mu.RLock()
	data, ok := s.pages[digest]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("pagetable: page %s: %w", digest, os.ErrNotExist)
	}
	return slices.Clone(data), nil
}

// Put keeps a copy of data under digest unless digest is present.
func (s *MemStore) Put(digest string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pages[digest]; !ok {
		s.pages[digest] = slices.Clone(data)
	}
	return nil
}

// link is os.Link; tests replace it to exercise Carry's copying fallback.
var link = os.Link

// Carry makes the page of digest present in dst, taking it from src: a
// hard link when both are DirStores (a copy when linking fails, e.g.
// across devices), otherwise src.Get and dst.Put. It does nothing when
// dst and src are the same store: the same pointer, or DirStores of the
// same cleaned Dir. A page missing from src is src's error.
func Carry(dst, src Store, digest string) error {
	d, dDir := dst.(*DirStore)
	s, sDir := src.(*DirStore)
	switch {
	case dDir && sDir && filepath.Clean(d.Dir) == filepath.Clean(s.Dir):
		return nil
	case reflect.TypeOf(dst) == reflect.TypeOf(src) &&
		reflect.TypeOf(dst).Kind() == reflect.Pointer && dst == src:
		return nil
	case dDir && sDir:
		if err := checkDigest(digest); err != nil {
			return err
		}
		if link(filepath.Join(s.Dir, digest), filepath.Join(d.Dir, digest)) == nil {
			return nil
		}
	}
	data, err := src.Get(digest)
	if err != nil {
		return err
	}
	return dst.Put(digest, data)
}

// checkDigest refuses a digest that is not 64 lowercase hex digits, so
// that a DirStore never opens a path outside its Dir.
func checkDigest(digest string) error {
	if _, err := hex.DecodeString(digest); err != nil || len(digest) != 64 || strings.ToLower(digest) != digest {
		return fmt.Errorf("pagetable: digest %q is not 64 lowercase hex digits", digest)
	}
	return nil
}
