package mutate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// ConflictError says a mutated file was changed by someone else before it
// could be restored: it was left as it is, and the original bytes were saved
// at Saved. A run stops at the first one.
type ConflictError struct {
	File  string
	Saved string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s changed while mutated (neither the original nor the mutated text): left untouched; original bytes saved at %s", e.File, e.Saved)
}

// ErrClosed is returned for a mutation attempted after RestoreAll began.
var ErrClosed = errors.New("mutate: restoring after a signal; no new mutation is applied")

// guard remembers every file that is mutated on disk right now, so that a
// deferred restore, a panic and a signal handler all restore the same set,
// each file once. A journal on disk lets a later run restore what a run
// killed with SIGKILL left behind.
type guard struct {
	mu      sync.Mutex
	closed  bool
	journal string // directory; "" disables it
	files   map[string]*mutatedFile
}

type mutatedFile struct {
	path           string // absolute
	orig, mutated  []byte
	mode           os.FileMode
	journalEntries []string
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type journalEntry struct {
	File          string `json:"file"`
	OrigSHA256    string `json:"origSHA256"`
	MutatedSHA256 string `json:"mutatedSHA256"`
}

func (g *guard) setJournal(dir string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.journal = dir
}

// write replaces path's content with mutated, after recording orig in the
// journal and in g. It refuses when the file no longer holds orig.
func (g *guard) write(path string, orig, mutated []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	if _, ok := g.files[path]; ok {
		return fmt.Errorf("%s is already mutated", path)
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	f := &mutatedFile{path: path, orig: orig, mutated: mutated, mode: st.Mode().Perm()}
	if g.journal != "" {
		if err := g.record(f); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	if g.files == nil {
		g.files = map[string]*mutatedFile{}
	}
	g.files[path] = f
	cur, err := os.ReadFile(path)
	if err == nil && !bytes.Equal(cur, orig) {
		err = fmt.Errorf("%s changed since it was read", path)
	}
	if err == nil {
		err = writeInPlace(path, mutated, f.mode)
	}
	if err != nil {
		// Whatever happened, the file must hold orig again.
		if rerr := g.restoreLocked(f); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	return nil
}

func (g *guard) record(f *mutatedFile) error {
	if err := os.MkdirAll(g.journal, 0o755); err != nil {
		return err
	}
	base := filepath.Join(g.journal, sum([]byte(f.path))[:16])
	if err := os.WriteFile(base+".orig", f.orig, 0o644); err != nil {
		return err
	}
	j, err := json.Marshal(journalEntry{File: f.path, OrigSHA256: sum(f.orig), MutatedSHA256: sum(f.mutated)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", j, 0o644); err != nil {
		return err
	}
	f.journalEntries = []string{base + ".json", base + ".orig"}
	return nil
}

// writeInPlace rewrites path keeping its inode, so editors and hard links
// see the same file.
func writeInPlace(path string, b []byte, mode os.FileMode) error {
	return os.WriteFile(path, b, mode)
}

// restore puts path's original bytes back, if it is mutated.
func (g *guard) restore(path string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	f, ok := g.files[path]
	if !ok {
		return nil
	}
	return g.restoreLocked(f)
}

// restoreLocked restores f: the mutated (or already original) content is
// replaced by the original bytes, verified by sha256; any other content is
// someone else's edit, left alone, and reported as a *ConflictError.
func (g *guard) restoreLocked(f *mutatedFile) error {
	cur, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("restore %s: %w", f.path, err)
	}
	switch {
	case bytes.Equal(cur, f.orig):
	case bytes.Equal(cur, f.mutated):
		if err := writeInPlace(f.path, f.orig, f.mode); err != nil {
			return fmt.Errorf("restore %s: %w", f.path, err)
		}
	default:
		saved, err := saveOriginal(f)
		delete(g.files, f.path)
		if err != nil {
			return fmt.Errorf("%w (and saving the original failed: %v)", &ConflictError{File: f.path}, err)
		}
		g.forget(f)
		return &ConflictError{File: f.path, Saved: saved}
	}
	after, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("restore %s: %w", f.path, err)
	}
	if sum(after) != sum(f.orig) {
		return fmt.Errorf("restore %s: sha256 %s after restoring, want %s", f.path, sum(after), sum(f.orig))
	}
	delete(g.files, f.path)
	g.forget(f)
	return nil
}

func (g *guard) forget(f *mutatedFile) {
	for _, p := range f.journalEntries {
		_ = os.Remove(p)
	}
}

func saveOriginal(f *mutatedFile) (string, error) {
	tmp, err := os.CreateTemp("", "mutate-original-*-"+filepath.Base(f.path))
	if err != nil {
		return "", err
	}
	defer tmp.Close()
	if _, err := tmp.Write(f.orig); err != nil {
		return "", err
	}
	return tmp.Name(), tmp.Close()
}

// restoreAll restores every mutated file and refuses new mutations from now
// on. It is what a signal handler calls.
func (g *guard) restoreAll() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	paths := make([]string, 0, len(g.files))
	for p := range g.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var errs []error
	for _, p := range paths {
		errs = append(errs, g.restoreLocked(g.files[p]))
	}
	return errors.Join(errs...)
}

// recoverJournal restores what an earlier run, killed before it could
// restore, left in the journal: a file still holding the mutated bytes gets
// the original back; one holding anything else is reported and left alone.
func (g *guard) recoverJournal() ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.journal == "" {
		return nil, nil
	}
	entries, err := filepath.Glob(filepath.Join(g.journal, "*.json"))
	if err != nil {
		return nil, err
	}
	var restored []string
	var errs []error
	for _, jp := range entries {
		b, err := os.ReadFile(jp)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var e journalEntry
		if err := json.Unmarshal(b, &e); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", jp, err))
			continue
		}
		origPath := jp[:len(jp)-len(".json")] + ".orig"
		orig, err := os.ReadFile(origPath)
		if err != nil || sum(orig) != e.OrigSHA256 {
			errs = append(errs, fmt.Errorf("%s: saved original of %s is missing or damaged", origPath, e.File))
			continue
		}
		cur, err := os.ReadFile(e.File)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch sum(cur) {
		case e.OrigSHA256:
		case e.MutatedSHA256:
			st, err := os.Stat(e.File)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if err := writeInPlace(e.File, orig, st.Mode().Perm()); err != nil {
				errs = append(errs, err)
				continue
			}
			restored = append(restored, e.File)
		default:
			errs = append(errs, fmt.Errorf("%s was left mutated by an earlier run and has changed since; original bytes are in %s", e.File, origPath))
			continue
		}
		_ = os.Remove(jp)
		_ = os.Remove(origPath)
	}
	return restored, errors.Join(errs...)
}
