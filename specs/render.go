package specs

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
)

// Source locates a document: the repository-relative file (or
// "kustomize build <dir>") and its 0-based index in that file.
type Source struct {
	File  string `json:"file"`
	Index int    `json:"document"`
	// Line is the 1-based line of File where the document starts.
	Line int `json:"line,omitempty"`
}

// positions maps a document's field paths ("spec.checks[1].deadline") to
// where they are written in its file.
type positions map[string]Position

// Position is a 1-based line and column in a file.
type Position struct {
	Line, Column int
}

// position returns where field is written: the field itself, or the
// nearest enclosing field that is (a missing field points at its parent),
// or the document's start.
func (ps positions) position(s Source, field string) Position {
	for p := field; ; {
		if pos, ok := ps[p]; ok {
			return pos
		}
		i := strings.LastIndexAny(p, ".[")
		if i <= 0 {
			break
		}
		p = p[:i]
	}
	if pos, ok := ps[""]; ok {
		return pos
	}
	if s.Line > 0 {
		return Position{Line: s.Line, Column: 1}
	}
	return Position{}
}

// Object is one rendered signet object.
type Object struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Source Source `json:"source"`
	// Profile is set when Kind is KindProfile, Request when it is
	// KindRequest, Standing when it is KindStanding.
	Profile  *CertificationProfile  `json:"-"`
	Request  *CertificationRequest  `json:"-"`
	Standing *StandingCertification `json:"-"`
	// Canonical is the RFC 8785 JSON that approvals sign: see
	// CanonicalProfile and CanonicalRequest for its exact shape (for a
	// request, its execution fields only).
	Canonical []byte `json:"-"`
	// Digest is the sha256 of Canonical.
	Digest Digest `json:"digest"`
	// positions locates the fields of the document, for findings.
	positions positions
}

// Ref returns the object's reference as approvals name it, e.g.
// "CertificationProfile/h100-burnin".
func (o *Object) Ref() string { return SubjectName(o.Kind, o.Name, "") }

// Rendering is the result of rendering one spec path of a repository.
type Rendering struct {
	// Objects are the signet objects that parsed, sorted by kind then
	// name, including those with findings.
	Objects []*Object
	// Findings are all problems found, sorted by file and document; the
	// rendering is valid exactly when there are none.
	Findings []Finding
	// Bundles are the bundles of the profiles, by profile name, as they
	// are in the repository (Digest is the actual digest, which a finding
	// reports when it differs from the pin). A profile whose bundle cannot
	// be read has no entry.
	Bundles map[string]BundleInfo
}

// Valid reports whether the rendering has no findings.
func (r *Rendering) Valid() bool { return len(r.Findings) == 0 }

// Profile returns the profile named name, or nil when there is none.
func (r *Rendering) Profile(name string) *Object { return r.find(KindProfile, name) }

// Request returns the request named name, or nil when there is none.
func (r *Rendering) Request(name string) *Object { return r.find(KindRequest, name) }

// Standing returns the standing certification named name, or nil when
// there is none.
func (r *Rendering) Standing(name string) *Object { return r.find(KindStanding, name) }

func (r *Rendering) find(kind, name string) *Object {
	for _, o := range r.Objects {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	return nil
}

// signetDir is the spec repository's own directory (approvals), at the
// repository root or in a spec path; its files are never spec documents.
const signetDir = ".signet"

// Render reads the spec path dir of the repository fsys (kustomize when dir
// holds kustomization.yaml, else every YAML file under dir, see
// LoadDocuments), parses every signet document strictly, digests each
// profile's bundle (bundle paths are relative to the root of fsys) and
// validates every rule of DESIGN §2 and §3. Problems with the specs are
// Findings, all of them; the error is only for input that cannot be
// rendered at all (dir missing or unreadable, a failed kustomize build).
//
// YAML files over MaxSpecFileBytes are reported and never read. Files under
// .signet/ and inside a profile's bundle directory are not spec files: their
// documents are ignored.
func Render(fsys fs.FS, dir string) (*Rendering, error) {
	if !fs.ValidPath(dir) {
		return nil, fmt.Errorf("render %q: not a valid path inside the repository", dir)
	}
	oversize, err := findOversize(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", dir, err)
	}
	docs, err := LoadDocuments(hidingFS{fsys: fsys, hidden: oversize}, dir)
	var me *ManifestError
	switch {
	case err == nil:
	case errors.As(err, &me) && !(me.File == dir && errors.Is(err, fs.ErrNotExist)) && !errors.Is(err, fs.ErrPermission):
		// The spec path is readable but refused (remote base, symlink,
		// kustomize failure, …): a problem of the specs, not of I/O.
		f := Finding{File: me.File, Document: -1, Field: me.Entry, Message: me.Err.Error()}
		return &Rendering{Findings: []Finding{f}, Bundles: map[string]BundleInfo{}}, nil
	default:
		return nil, fmt.Errorf("render %s: %w", dir, err)
	}

	type located struct {
		file     string
		findings []Finding
		obj      *Object
		claimed  claim
	}
	var parsed []located
	for _, doc := range docs {
		o, claimed, fs := parseSource(doc)
		parsed = append(parsed, located{file: doc.File, findings: fs, obj: o, claimed: claimed})
	}
	for _, name := range slices.Sorted(maps.Keys(oversize)) {
		parsed = append(parsed, located{file: name, findings: []Finding{tooLarge(name, -1, oversize[name])}})
	}

	// Bundle directories are known only once profiles are parsed.
	var bundleDirs []string
	for _, p := range parsed {
		bp := p.claimed.bundlePath
		if p.obj != nil && p.obj.Profile != nil {
			bp = p.obj.Profile.Spec.Bundle.Path
		}
		if cleanRelative(bp) {
			bundleDirs = append(bundleDirs, bp)
		}
	}
	r := &Rendering{Bundles: map[string]BundleInfo{}}
	broken := map[string]bool{} // profiles that exist but did not parse
	for _, p := range parsed {
		if slices.Contains(strings.Split(p.file, "/"), signetDir) || slices.ContainsFunc(bundleDirs, func(b string) bool { return isUnder(p.file, b) }) {
			continue
		}
		if name, ok := strings.CutPrefix(p.claimed.ref, KindProfile+"/"); ok {
			broken[name] = true
		}
		r.Findings = append(r.Findings, p.findings...)
		if p.obj != nil {
			r.Objects = append(r.Objects, p.obj)
		}
	}
	slices.SortStableFunc(r.Objects, func(a, b *Object) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Source.File, b.Source.File), cmp.Compare(a.Source.Index, b.Source.Index))
	})

	// Duplicate names: the first (in sort order) wins, later ones are
	// reported and not used to resolve references.
	profiles := map[string]*Object{}
	firsts := map[string]*Object{}
	for _, o := range r.Objects {
		ref := o.Ref()
		if first, dup := firsts[ref]; dup {
			r.Findings = append(r.Findings, Finding{File: o.Source.File, Document: o.Source.Index, Field: "metadata.name",
				Message: fmt.Sprintf("%s is defined twice: also in %s[doc %d]", ref, first.Source.File, first.Source.Index)})
			continue
		}
		firsts[ref] = o
		if o.Profile != nil {
			profiles[o.Name] = o
		}
	}

	for _, o := range r.Objects {
		if o.Profile == nil {
			continue
		}
		var info *BundleInfo
		bp := o.Profile.Spec.Bundle.Path
		if cleanRelative(bp) {
			d, files, err := BundleDigest(fsys, bp)
			var be *BundleError
			switch {
			case err == nil:
				bi := BundleInfo{Path: bp, Digest: d, Files: files}
				for _, f := range files {
					bi.Size += f.Size
				}
				info = &bi
				if profiles[o.Name] == o {
					r.Bundles[o.Name] = bi
				}
			case errors.As(err, &be) && (errors.Is(err, fs.ErrNotExist)):
				r.Findings = append(r.Findings, Finding{File: o.Source.File, Document: o.Source.Index, Field: "spec.bundle.path",
					Message: fmt.Sprintf("bundle %s does not exist in the repository", bp)})
			default:
				r.Findings = append(r.Findings, Finding{File: o.Source.File, Document: o.Source.Index, Field: "spec.bundle.path",
					Message: err.Error()})
			}
		}
		r.Findings = append(r.Findings, validateProfile(o, info)...)
	}
	var standings []string
	for _, o := range r.Objects {
		if o.Standing != nil {
			standings = append(standings, o.Name)
		}
	}
	for _, o := range r.Objects {
		switch {
		case o.Request != nil:
			r.Findings = append(r.Findings, validateRequest(o, profiles, broken)...)
			r.Findings = append(r.Findings, requestNotFiring(o, standings)...)
		case o.Standing != nil:
			r.Findings = append(r.Findings, validateStanding(o, profiles, broken)...)
		}
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Document, b.Document))
	})
	return r, nil
}

// isUnder reports whether the slash path p is dir or inside it.
func isUnder(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// isYAML reports whether name is a YAML file that spec discovery reads.
func isYAML(name string) bool {
	ext := path.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

// findOversize returns the YAML files under dir larger than
// MaxSpecFileBytes, with their sizes, without reading them.
func findOversize(fsys fs.FS, dir string) (map[string]int64, error) {
	out := map[string]int64{}
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isYAML(p) || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > MaxSpecFileBytes {
			out[p] = info.Size()
		}
		return nil
	})
	return out, err
}

// hidingFS is fsys without the files in hidden: opening them fails with
// fs.ErrNotExist and directory listings leave them out, so that
// LoadDocuments never reads an oversized file.
type hidingFS struct {
	fsys   fs.FS
	hidden map[string]int64
}

func (h hidingFS) isHidden(name string) bool {
	_, ok := h.hidden[path.Clean(name)]
	return ok
}

func (h hidingFS) Open(name string) (fs.File, error) {
	if h.isHidden(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	f, err := h.fsys.Open(name)
	if err != nil {
		return nil, err
	}
	if d, ok := f.(fs.ReadDirFile); ok && len(h.hidden) > 0 {
		return &hidingDir{ReadDirFile: d, fs: h, dir: name}, nil
	}
	return f, nil
}

func (h hidingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(h.fsys, name)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return h.isHidden(path.Join(name, e.Name())) }), nil
}

func (h hidingFS) Stat(name string) (fs.FileInfo, error) {
	if h.isHidden(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return fs.Stat(h.fsys, name)
}

// Lstat makes hidingFS an fs.ReadLinkFS: it answers as lstat on the
// file system it hides files of, so that a Git tree answers for one
// entry without a listing of its directory.
func (h hidingFS) Lstat(name string) (fs.FileInfo, error) {
	if h.isHidden(name) {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	return lstat(h.fsys, name)
}

func (h hidingFS) ReadLink(name string) (string, error) {
	if h.isHidden(name) {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrNotExist}
	}
	return fs.ReadLink(h.fsys, name)
}

type hidingDir struct {
	fs.ReadDirFile
	fs  hidingFS
	dir string
}

func (d *hidingDir) ReadDir(n int) ([]fs.DirEntry, error) {
	entries, err := d.ReadDirFile.ReadDir(n)
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return d.fs.isHidden(path.Join(d.dir, e.Name())) }), err
}
