package specs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	ktypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Bounds on what LoadDocuments reads, so that a hostile repository cannot
// exhaust memory before a single document is parsed.
const (
	// MaxSpecFileBytes is the largest YAML file (spec file or kustomization
	// input) signet reads.
	MaxSpecFileBytes = 1 << 20
	// MaxSpecFiles is the most files one spec path may hand to the parser
	// or to kustomize.
	MaxSpecFiles = 4096
	// MaxSpecBytes is the most bytes one spec path may hand to the parser
	// or to kustomize, and the most kustomize may produce.
	MaxSpecBytes = 32 << 20
)

// KustomizeFilePrefix starts SourceDocument.File for documents produced by
// kustomize: "kustomize:<repo-relative path of the kustomization file>".
const KustomizeFilePrefix = "kustomize:"

// kustomizationNames are the file names kustomize recognises, in its order.
var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// SourceDocument is one YAML document found under a spec path.
//
// File is the repo-relative, slash-separated file name, or for kustomize
// output KustomizeFilePrefix followed by the kustomization file's path.
// Index is the 0-based position of the document among the non-empty
// documents of File (for kustomize output: in kustomize's output order).
// Data is the document's raw bytes, without its "---" marker line; Line
// is the 1-based line of File where Data starts (0 when unknown: kustomize
// output).
//
// Origin, for kustomize output, is the source file and document it came
// from, when kustomize's origin annotations and the document's kind and
// name tell; its findings point there.
type SourceDocument struct {
	File   string
	Index  int
	Data   []byte
	Line   int
	Origin *DocumentOrigin
}

// ManifestError says why a spec path could not be read: File is the
// repo-relative file (a kustomization file, a YAML file or a directory),
// Entry, when set, the kustomization field and value at fault.
type ManifestError struct {
	File  string
	Entry string
	Err   error
}

func (e *ManifestError) Error() string {
	if e.Entry != "" {
		return fmt.Sprintf("%s: %s: %v", e.File, e.Entry, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *ManifestError) Unwrap() error { return e.Err }

// Reasons a spec path is refused; test with errors.Is.
var (
	ErrRemoteResource  = errors.New("remote resources are refused: only files of the repository are rendered")
	ErrEscapesRepo     = errors.New("escapes the repository root")
	ErrSymlink         = errors.New("is a symlink; spec paths hold regular files and directories only")
	ErrNotRegular      = errors.New("is not a regular file")
	ErrSpecFileTooBig  = fmt.Errorf("is larger than %d bytes", MaxSpecFileBytes)
	ErrSpecTooLarge    = errors.New("spec path is too large")
	ErrHelmUnsupported = errors.New("helm charts are not supported")
	ErrYAMLAlias       = errors.New("uses a YAML alias; aliases are not allowed (they can expand without bound)")
)

// LoadDocuments returns the YAML documents of spec path dir in fsys, never
// reading the real disk beyond fsys and never the network.
//
// With a kustomization file (kustomization.yaml, kustomization.yml or
// Kustomization) in dir, the documents are kustomize's output (krusty,
// plugins off, load restrictor root-only), built over an in-memory
// filesystem that holds only the regular files of fsys the kustomizations
// reachable from dir name. Before kustomize runs, every kustomization is
// read and each path it names (resources, bases, components, patches,
// generator files, …) is refused if it is remote (a URL, a git reference,
// a github.com path), absolute, escapes the root of fsys, passes through a
// symlink or does not exist; helm charts and YAML aliases (which kustomize
// would expand without bound) are refused.
//
// Without one, every *.yaml and *.yml file below dir is read, in bytewise
// order of path; entries whose name starts with "." (.git, .github,
// .signet, …) are skipped, symlinks are refused. Each file is split on YAML
// document markers; documents holding only comments and whitespace are
// dropped.
//
// Files over MaxSpecFileBytes, more than MaxSpecFiles files or
// MaxSpecBytes bytes are refused. Every error is a *ManifestError.
func LoadDocuments(fsys fs.FS, dir string) ([]SourceDocument, error) {
	if !fs.ValidPath(dir) {
		return nil, &ManifestError{File: dir, Err: ErrEscapesRepo}
	}
	if err := checkNoSymlink(fsys, dir); err != nil {
		return nil, &ManifestError{File: dir, Err: unwrapBundle(err)}
	}
	info, err := fs.Stat(fsys, dir)
	if err != nil {
		return nil, &ManifestError{File: dir, Err: err}
	}
	if !info.IsDir() {
		return nil, &ManifestError{File: dir, Err: errors.New("is not a directory")}
	}
	kfile, err := findKustomization(fsys, dir)
	if err != nil {
		return nil, err
	}
	if kfile != "" {
		return loadKustomize(fsys, dir, kfile)
	}
	return loadPlain(fsys, dir)
}

// unwrapBundle turns a *BundleError from the shared path checks into its
// reason, so that ManifestError names the path once.
func unwrapBundle(err error) error {
	var be *BundleError
	if errors.As(err, &be) {
		if errors.Is(be.Err, ErrBundleSymlink) {
			return fmt.Errorf("%s %w", be.Path, ErrSymlink)
		}
		return be.Err
	}
	return err
}

func isYAMLName(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// loadPlain reads every YAML file under dir.
func loadPlain(fsys fs.FS, dir string) ([]SourceDocument, error) {
	var files []string
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &ManifestError{File: p, Err: err}
		}
		if p == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		t := d.Type()
		if t&fs.ModeSymlink != 0 {
			return &ManifestError{File: p, Err: ErrSymlink}
		}
		if t.IsDir() || !isYAMLName(d.Name()) {
			return nil
		}
		files = append(files, p)
		if len(files) > MaxSpecFiles {
			return &ManifestError{File: dir, Err: fmt.Errorf("%w: more than %d YAML files", ErrSpecTooLarge, MaxSpecFiles)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var docs []SourceDocument
	var total int64
	for _, f := range files {
		data, err := readSpecFile(fsys, f)
		if err != nil {
			return nil, err
		}
		total += int64(len(data))
		if total > MaxSpecBytes {
			return nil, &ManifestError{File: dir, Err: fmt.Errorf("%w: more than %d bytes of YAML", ErrSpecTooLarge, MaxSpecBytes)}
		}
		segs, lines := splitDocuments(data)
		for i, doc := range segs {
			docs = append(docs, SourceDocument{File: f, Index: i, Data: doc, Line: lines[i]})
		}
	}
	return docs, nil
}

// readSpecFile reads a regular, non-symlink file of at most
// MaxSpecFileBytes, reading no more than one byte past the bound.
func readSpecFile(fsys fs.FS, name string) ([]byte, error) {
	li, err := lstat(fsys, name)
	if err != nil {
		return nil, &ManifestError{File: name, Err: err}
	}
	if li.Mode()&fs.ModeSymlink != 0 {
		return nil, &ManifestError{File: name, Err: ErrSymlink}
	}
	if !li.Mode().IsRegular() {
		return nil, &ManifestError{File: name, Err: ErrNotRegular}
	}
	if li.Size() > MaxSpecFileBytes {
		return nil, &ManifestError{File: name, Err: fmt.Errorf("%w (%d bytes)", ErrSpecFileTooBig, li.Size())}
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, &ManifestError{File: name, Err: err}
	}
	defer f.Close()
	oi, err := f.Stat()
	if err != nil {
		return nil, &ManifestError{File: name, Err: err}
	}
	if !oi.Mode().IsRegular() {
		return nil, &ManifestError{File: name, Err: ErrNotRegular}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecFileBytes+1))
	if err != nil {
		return nil, &ManifestError{File: name, Err: err}
	}
	if len(data) > MaxSpecFileBytes {
		return nil, &ManifestError{File: name, Err: ErrSpecFileTooBig}
	}
	return data, nil
}

// SplitDocuments splits a YAML stream into its documents' raw bytes.
//
// A line starting with "---" followed by a space, tab, CR or the end of
// the line starts a document; a line "..." (optionally followed by
// whitespace or a comment) ends one. YAML forbids both at the start of a
// line inside any scalar, so no quoting context needs tracking. Text after
// "--- " on the marker line (a flow collection, a block scalar indicator)
// stays in the document. Documents holding only blank lines, comments and
// directives ("%YAML") are dropped and take no index. The returned slices
// share data's backing array.
func SplitDocuments(data []byte) [][]byte {
	docs, _ := splitDocuments(data)
	return docs
}

// splitDocuments is SplitDocuments that also returns the 1-based line of
// data where each document starts.
func splitDocuments(data []byte) (docs [][]byte, lines []int) {
	start := 0
	flush := func(end int) {
		if seg := data[start:end]; !blankYAML(seg) {
			docs = append(docs, seg[:len(seg):len(seg)])
			lines = append(lines, bytes.Count(data[:start], []byte("\n"))+1)
		}
	}
	for off := 0; off < len(data); {
		nl := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if nl >= 0 {
			next = off + nl + 1
		}
		line := data[off:next]
		switch {
		case isMarker(line, "---"):
			flush(off)
			start = off + 3
		case isMarker(line, "..."):
			flush(off)
			start = next
		}
		off = next
	}
	flush(len(data))
	return docs, lines
}

// isMarker reports whether line is marker followed by whitespace, a
// comment or the end of the line.
func isMarker(line []byte, marker string) bool {
	if !bytes.HasPrefix(line, []byte(marker)) {
		return false
	}
	rest := line[len(marker):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' || rest[0] == '\n'
}

// blankYAML reports whether seg holds only whitespace, comments and
// directives.
func blankYAML(seg []byte) bool {
	for len(seg) > 0 {
		line := seg
		if i := bytes.IndexByte(seg, '\n'); i >= 0 {
			line, seg = seg[:i], seg[i+1:]
		} else {
			seg = nil
		}
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' || line[0] == '%' {
			continue
		}
		return false
	}
	return true
}

// findKustomization returns the path of dir's kustomization file, "" when
// there is none, or an error when there is more than one.
func findKustomization(fsys fs.FS, dir string) (string, error) {
	var found []string
	for _, n := range kustomizationNames {
		p := path.Join(dir, n)
		if _, err := lstat(fsys, p); err == nil {
			found = append(found, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", &ManifestError{File: p, Err: err}
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	}
	return "", &ManifestError{File: dir, Err: fmt.Errorf("holds more than one kustomization file: %s", strings.Join(found, ", "))}
}

// kustomizeInputs collects the files of fsys a kustomize build may read.
type kustomizeInputs struct {
	fsys    fs.FS
	files   map[string][]byte
	bytes   int64
	visited map[string]bool
}

func (in *kustomizeInputs) addFile(kfile, entry, p string) error {
	if _, ok := in.files[p]; ok {
		return nil
	}
	data, err := readSpecFile(in.fsys, p)
	if err != nil {
		var me *ManifestError
		if errors.As(err, &me) && kfile != p {
			return &ManifestError{File: kfile, Entry: entry, Err: fmt.Errorf("%s %w", me.File, me.Err)}
		}
		return err
	}
	if err := checkNoAliases(data); err != nil {
		if kfile == p {
			return &ManifestError{File: p, Err: err}
		}
		return &ManifestError{File: kfile, Entry: entry, Err: fmt.Errorf("%s %w", p, err)}
	}
	in.files[p] = data
	in.bytes += int64(len(data))
	if len(in.files) > MaxSpecFiles {
		return &ManifestError{File: kfile, Err: fmt.Errorf("%w: more than %d kustomize inputs", ErrSpecTooLarge, MaxSpecFiles)}
	}
	if in.bytes > MaxSpecBytes {
		return &ManifestError{File: kfile, Err: fmt.Errorf("%w: more than %d bytes of kustomize input", ErrSpecTooLarge, MaxSpecBytes)}
	}
	return nil
}

// loadKustomize checks the kustomizations reachable from dir, copies the
// files they name into an in-memory filesystem and builds dir there.
func loadKustomize(fsys fs.FS, dir, kfile string) ([]SourceDocument, error) {
	in := &kustomizeInputs{fsys: fsys, files: map[string][]byte{}, visited: map[string]bool{}}
	if err := in.walk(dir, kfile); err != nil {
		return nil, err
	}
	mem := filesys.MakeFsInMemory()
	for p, data := range in.files {
		if err := mem.WriteFile(path.Join("/", p), data); err != nil {
			return nil, &ManifestError{File: p, Err: err}
		}
	}
	// Findings point at the source files: kustomize records where each
	// resource came from when the top kustomization asks for origin
	// annotations. Asked for here (in memory only) and removed from the
	// output, so the rendered documents are byte for byte what they are
	// without; a kustomization that asks for them itself keeps them.
	asked, err := askOrigins(mem, kfile, in.files[kfile])
	if err != nil {
		return nil, &ManifestError{File: kfile, Err: err}
	}
	out, origins, err := runKustomize(mem, path.Join("/", dir), asked)
	if err != nil {
		return nil, &ManifestError{File: kfile, Err: err}
	}
	if len(out) > MaxSpecBytes {
		return nil, &ManifestError{File: kfile, Err: fmt.Errorf("%w: kustomize produced more than %d bytes", ErrSpecTooLarge, MaxSpecBytes)}
	}
	segs := SplitDocuments(out)
	if len(origins) != len(segs) {
		origins = nil
	}
	var docs []SourceDocument
	for i, doc := range segs {
		d := SourceDocument{File: KustomizeFilePrefix + kfile, Index: i, Data: doc}
		if origins != nil && origins[i] != "" {
			if src, ok := in.files[origins[i]]; ok {
				d.Origin = findOrigin(origins[i], src, doc)
			}
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// askOrigins adds originAnnotations to the buildMetadata of the
// kustomization kfile (data) in mem, unless it sets buildMetadata itself.
// It reports whether it did, so that the annotations are removed again.
func askOrigins(mem filesys.FileSystem, kfile string, data []byte) (bool, error) {
	// Edited as a node tree, so that every other scalar keeps its text
	// and style (a map round trip would turn a label "1.10" into 1.1).
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return false, nil // kustomize reports what is wrong with it
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "buildMetadata" {
			return false, nil
		}
	}
	top.Content = append(top.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "buildMetadata"},
		&yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: "originAnnotations"}}})
	b, err := yaml.Marshal(&doc)
	if err != nil {
		return false, nil
	}
	return true, mem.WriteFile(path.Join("/", kfile), b)
}

// runKustomize builds dir of mem with krusty, plugins off and the
// root-only load restrictor, and returns its YAML output and the
// repo-relative source file of each resource (see resourceOrigins),
// without the origin annotations when removeOrigins is set. A panic inside
// kustomize is returned as an error: hostile input must not stop the
// reconciler.
func runKustomize(mem filesys.FileSystem, dir string, removeOrigins bool) (out []byte, origins []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, origins, err = nil, nil, fmt.Errorf("kustomize build: panic: %v", r)
		}
	}()
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = ktypes.DisabledPluginConfig()
	opts.LoadRestrictions = ktypes.LoadRestrictionsRootOnly
	m, err := krusty.MakeKustomizer(opts).Run(mem, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("kustomize build: %w", err)
	}
	origins = resourceOrigins(m, strings.TrimPrefix(dir, "/"))
	if removeOrigins {
		if err := m.RemoveOriginAnnotations(); err != nil {
			return nil, nil, fmt.Errorf("kustomize output: %w", err)
		}
	}
	out, err = m.AsYaml()
	if err != nil {
		return nil, nil, fmt.Errorf("kustomize output: %w", err)
	}
	return out, origins, nil
}

// walk checks the kustomization kfile of directory kdir and every
// kustomization it reaches, collecting the files they name.
func (in *kustomizeInputs) walk(kdir, kfile string) error {
	if in.visited[kdir] {
		return nil
	}
	in.visited[kdir] = true
	if err := in.addFile(kfile, "", kfile); err != nil {
		return err
	}
	var k ktypes.Kustomization
	if err := k.Unmarshal(in.files[kfile]); err != nil {
		return &ManifestError{File: kfile, Err: err}
	}
	if len(k.HelmCharts) > 0 || k.HelmGlobals != nil || len(k.HelmChartInflationGenerator) > 0 {
		return &ManifestError{File: kfile, Entry: "helmCharts", Err: ErrHelmUnsupported}
	}

	// Entries that may name a directory holding another kustomization.
	// Generators, transformers and validators may also be inline YAML.
	for _, f := range []struct {
		field   string
		entries []string
		dirOnly bool
		inline  bool
	}{
		{"resources", k.Resources, false, false},
		{"bases", k.Bases, true, false},
		{"components", k.Components, true, false},
		{"generators", k.Generators, false, true},
		{"transformers", k.Transformers, false, true},
		{"validators", k.Validators, false, true},
	} {
		for i, e := range f.entries {
			if f.inline && isInlineYAML(e) {
				continue
			}
			entry := fmt.Sprintf("%s[%d] %q", f.field, i, e)
			p, err := in.localRef(kfile, entry, kdir, e)
			if err != nil {
				return err
			}
			info, err := fs.Stat(in.fsys, p)
			if err != nil {
				return &ManifestError{File: kfile, Entry: entry, Err: fmt.Errorf("%s is not in the repository: %w", p, fs.ErrNotExist)}
			}
			if !info.IsDir() {
				if f.dirOnly {
					return &ManifestError{File: kfile, Entry: entry, Err: fmt.Errorf("%s is not a directory", p)}
				}
				if err := in.addFile(kfile, entry, p); err != nil {
					return err
				}
				continue
			}
			sub, err := findKustomization(in.fsys, p)
			if err != nil {
				return err
			}
			if sub == "" {
				return &ManifestError{File: kfile, Entry: entry, Err: fmt.Errorf("directory %s holds no kustomization file", p)}
			}
			if err := in.walk(p, sub); err != nil {
				return err
			}
		}
	}

	// Entries that name files read by the kustomization itself.
	type fileEntry struct{ entry, value string }
	var refs []fileEntry
	for i, v := range k.Crds {
		refs = append(refs, fileEntry{fmt.Sprintf("crds[%d] %q", i, v), v})
	}
	for i, v := range k.Configurations {
		refs = append(refs, fileEntry{fmt.Sprintf("configurations[%d] %q", i, v), v})
	}
	for i, p := range k.PatchesStrategicMerge {
		if v := string(p); !isInlineYAML(v) {
			refs = append(refs, fileEntry{fmt.Sprintf("patchesStrategicMerge[%d] %q", i, v), v})
		}
	}
	for i, p := range k.Patches {
		if p.Path != "" {
			refs = append(refs, fileEntry{fmt.Sprintf("patches[%d].path %q", i, p.Path), p.Path})
		}
	}
	for i, p := range k.PatchesJson6902 {
		if p.Path != "" {
			refs = append(refs, fileEntry{fmt.Sprintf("patchesJson6902[%d].path %q", i, p.Path), p.Path})
		}
	}
	for i, r := range k.Replacements {
		if r.Path != "" {
			refs = append(refs, fileEntry{fmt.Sprintf("replacements[%d].path %q", i, r.Path), r.Path})
		}
	}
	if p := k.OpenAPI["path"]; p != "" {
		refs = append(refs, fileEntry{fmt.Sprintf("openapi.path %q", p), p})
	}
	gen := func(field string, i int, src ktypes.KvPairSources) {
		for j, f := range src.FileSources {
			// "key=path" or "path".
			if _, v, ok := strings.Cut(f, "="); ok {
				f = v
			}
			refs = append(refs, fileEntry{fmt.Sprintf("%s[%d].files[%d] %q", field, i, j, f), f})
		}
		for j, f := range src.EnvSources {
			refs = append(refs, fileEntry{fmt.Sprintf("%s[%d].envs[%d] %q", field, i, j, f), f})
		}
		if src.EnvSource != "" {
			refs = append(refs, fileEntry{fmt.Sprintf("%s[%d].env %q", field, i, src.EnvSource), src.EnvSource})
		}
	}
	for i, g := range k.ConfigMapGenerator {
		gen("configMapGenerator", i, g.KvPairSources)
	}
	for i, g := range k.SecretGenerator {
		gen("secretGenerator", i, g.KvPairSources)
	}
	for _, r := range refs {
		p, err := in.localRef(kfile, r.entry, kdir, r.value)
		if err != nil {
			return err
		}
		if err := in.addFile(kfile, r.entry, p); err != nil {
			return err
		}
	}
	return nil
}

// localRef resolves entry value v of kustomization kfile (in directory
// kdir) to a path of fsys, refusing remote references, absolute paths,
// escapes from the root of fsys and paths through symlinks.
func (in *kustomizeInputs) localRef(kfile, entry, kdir, v string) (string, error) {
	if isRemoteRef(v) {
		return "", &ManifestError{File: kfile, Entry: entry, Err: ErrRemoteResource}
	}
	if strings.HasPrefix(v, "/") || strings.HasPrefix(v, "\\") || (len(v) > 1 && v[1] == ':') {
		return "", &ManifestError{File: kfile, Entry: entry, Err: fmt.Errorf("is an absolute path and %w", ErrEscapesRepo)}
	}
	p := path.Join(kdir, v)
	if p == ".." || strings.HasPrefix(p, "../") || !fs.ValidPath(p) {
		return "", &ManifestError{File: kfile, Entry: entry, Err: ErrEscapesRepo}
	}
	if err := checkNoSymlink(in.fsys, p); err != nil {
		var be *BundleError
		if errors.As(err, &be) && errors.Is(be.Err, ErrBundleSymlink) {
			return "", &ManifestError{File: kfile, Entry: entry, Err: fmt.Errorf("%s %w", be.Path, ErrSymlink)}
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "", &ManifestError{File: kfile, Entry: entry, Err: fmt.Errorf("%s is not in the repository: %w", p, fs.ErrNotExist)}
		}
		return "", &ManifestError{File: kfile, Entry: entry, Err: unwrapBundle(err)}
	}
	return p, nil
}

// isInlineYAML reports whether a kustomization entry that may be either a
// path or inline YAML is inline: it spans lines or is a flow mapping.
func isInlineYAML(v string) bool {
	return strings.Contains(v, "\n") || strings.HasPrefix(strings.TrimSpace(v), "{")
}

// isRemoteRef reports whether kustomize could treat v as a URL or a git
// repository: anything with a scheme, a query, a "//" subpath marker, an
// scp-style user@host, a "git::" prefix or a github.com host. Such entries
// are refused even when a local path of that name exists, because
// kustomize tries the remote interpretation first.
func isRemoteRef(v string) bool {
	if strings.TrimSpace(v) != v {
		return true // padded: never a plain repository path
	}
	l := strings.ToLower(v)
	switch {
	case strings.Contains(l, "://"), strings.Contains(l, "?"), strings.Contains(l, "//"),
		strings.HasPrefix(l, "git::"), strings.HasPrefix(l, "gh:"):
		return true
	}
	first, _, _ := strings.Cut(l, "/")
	if strings.Contains(first, "@") || strings.Contains(first, "github.com") {
		return true
	}
	if strings.Contains(first, ":") {
		return true // scp-style host:path or a scheme without slashes
	}
	return false
}

// checkNoAliases refuses YAML that uses an alias anywhere, before
// kustomize, which expands aliases, can be made to build an alias bomb.
// Data that is not YAML (a generator's text file) is left to kustomize.
func checkNoAliases(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return nil // end of input, or not YAML: nothing expands
		}
		stack := []*yaml.Node{&doc}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if n.Kind == yaml.AliasNode {
				return fmt.Errorf("(line %d) %w", n.Line, ErrYAMLAlias)
			}
			stack = append(stack, n.Content...)
		}
	}
}
