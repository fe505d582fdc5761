package report

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"signet.dev/signet/specs"
)

// The layout of the output directory. Every report is a generation: a
// directory gens/<id> written whole under a temporary name and renamed
// in, never changed after (id is the first 16 hex of the digest of its
// manifest, so the same pages are the same generation). The symbolic
// link current names the latest; index.html, the entry, is the latest
// generation's index with a <base> into it, so that a reader who opened
// it follows links inside that one generation even while a later one is
// switched in. The previous generation is kept until the next report,
// for readers still inside it. Build writes this layout; ServedPath and
// Written are how a server reads it.
const (
	// GenerationsDir holds the generations.
	GenerationsDir = "gens"
	// CurrentLink names the latest generation (gens/<id>).
	CurrentLink = "current"
	// EntryFile is the entry page, in the output directory itself.
	EntryFile = "index.html"
	// lockFile serializes reports into one directory.
	lockFile = ".lock"
	// idLen is the length of a generation's id, in lower-case hex.
	idLen = 16
)

// generationID is the id of the generation whose manifest is mb.
func generationID(mb []byte) string {
	return strings.TrimPrefix(string(specs.DigestOf(mb)), "sha256:")[:idLen]
}

// isGenerationID reports whether id has the form generationID gives.
func isGenerationID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// linkedGeneration is the id of the generation a current link's target
// names ("gens/<id>"), "" when it names anything else.
func linkedGeneration(target string) string {
	id, ok := strings.CutPrefix(target, GenerationsDir+"/")
	if !ok || !isGenerationID(id) {
		return ""
	}
	return id
}

// currentGeneration is the id the current link in dir names, "" when
// there is none (or it names something that is not a generation).
func currentGeneration(dir string) string {
	t, err := os.Readlink(filepath.Join(dir, CurrentLink))
	if err != nil {
		return ""
	}
	return linkedGeneration(t)
}

// ServedPath reports whether name, a slash-separated path relative to
// the output directory, is a file of the report that a server may give
// a reader: the entry (index.html) or a file inside a generation
// (gens/<id>/… or current/…). No element of it may start with a dot, so
// the lock file, a generation still being written (gens/.tmp-*) and a
// temporary file never are; nor is anything else that shares the
// directory. Whether the file exists is the caller's to find out.
func ServedPath(name string) bool {
	if !fs.ValidPath(name) {
		return false
	}
	if name == EntryFile {
		return true
	}
	elems := strings.Split(name, "/")
	for _, e := range elems {
		if strings.HasPrefix(e, ".") {
			return false
		}
	}
	switch {
	case len(elems) >= 2 && elems[0] == CurrentLink:
		return true
	case len(elems) >= 3 && elems[0] == GenerationsDir && isGenerationID(elems[1]):
		return true
	}
	return false
}

// Written reports whether the output directory fsys holds a report a
// reader can open: its current link names a generation and its entry is
// a regular file. It is false before the first report is switched in
// (and while the directory holds only a report of the flat layout
// before generations), true from then on.
func Written(fsys fs.FS) bool {
	t, err := fs.ReadLink(fsys, CurrentLink)
	if err != nil || linkedGeneration(t) == "" {
		return false
	}
	st, err := fs.Stat(fsys, EntryFile)
	return err == nil && st.Mode().IsRegular()
}
