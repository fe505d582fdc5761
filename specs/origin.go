package specs

import (
	"bytes"
	"path"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/resmap"
)

// DocumentOrigin is the source file and document a kustomize output
// document came from, found through kustomize's origin annotations: its
// findings point there (file:line:column of the nearest field the source
// writes) rather than at the rendered output, which no one edits.
type DocumentOrigin struct {
	File  string // repo-relative source file
	Index int    // 0-based document in File
	Line  int    // 1-based line of File where the document starts
	// positions are where the source document writes each field path.
	positions positions
}

// remap points the findings and the object of a rendered document at its
// origin.
func (g *DocumentOrigin) remap(o *Object, fs []Finding) (*Object, []Finding) {
	src := Source{File: g.File, Index: g.Index, Line: g.Line}
	for i := range fs {
		p := g.positions.position(src, fs[i].Field)
		fs[i].File, fs[i].Document, fs[i].Line, fs[i].Column = g.File, g.Index, p.Line, p.Column
	}
	if o != nil {
		o.Source, o.positions = src, g.positions
	}
	return o, fs
}

// resourceOrigins returns, per resource of m in order, the repo-relative
// path of the local file it came from ("" when kustomize recorded none, or
// a remote one), dir being the directory kustomize built.
func resourceOrigins(m resmap.ResMap, dir string) []string {
	var out []string
	for _, r := range m.Resources() {
		o, err := r.GetOrigin()
		if err != nil || o == nil || o.Repo != "" || o.Path == "" {
			out = append(out, "")
			continue
		}
		p := path.Clean(path.Join(dir, o.Path))
		if !strings.HasPrefix(p, "../") && p != ".." {
			out = append(out, p)
		} else {
			out = append(out, "")
		}
	}
	return out
}

// findOrigin finds in data (the source file's bytes) the document the
// rendered document doc came from: the file's only document, or the one
// of the same kind whose metadata.name is the rendered name, or else the
// one of that kind with the longest name the rendered name contains (a
// namePrefix or nameSuffix). nil when it cannot tell.
func findOrigin(file string, data, doc []byte) *DocumentOrigin {
	segs, lines := splitDocuments(data)
	pick := -1
	if len(segs) == 1 {
		pick = 0
	} else {
		kind, name := docKindName(doc)
		longest, tie := 0, false
		for i, s := range segs {
			k, n := docKindName(s)
			switch {
			case k != kind || n == "" || !strings.Contains(name, n) || len(n) < longest:
			case n == name:
				pick, longest, tie = i, len(n), false
			case len(n) == longest:
				tie = true
			default:
				pick, longest, tie = i, len(n), false
			}
		}
		if tie {
			pick = -1
		}
	}
	if pick < 0 {
		return nil
	}
	var n yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(segs[pick])).Decode(&n); err != nil {
		return nil
	}
	ps := positions{}
	walkPositions(&n, max(lines[pick]-1, 0), "", ps)
	if _, ok := ps[""]; !ok {
		ps[""] = Position{Line: lines[pick], Column: 1}
	}
	return &DocumentOrigin{File: file, Index: pick, Line: ps[""].Line, positions: ps}
}

// docKindName reads a document's kind and metadata.name, "" when unreadable.
func docKindName(doc []byte) (kind, name string) {
	var v struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
	}
	if yaml.Unmarshal(doc, &v) != nil {
		return "", ""
	}
	return v.Kind, v.Metadata.Name
}

// walkPositions records where n (lines of its file before it: off) writes
// each field path, in the decoder's notation (spec.checks[1].deadline): a
// field at its key, a list element at the element. Aliases are not
// followed (a spec path refuses them before kustomize runs).
func walkPositions(n *yaml.Node, off int, prefix string, ps positions) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) > 0 {
			ps[""] = Position{Line: off + n.Content[0].Line, Column: n.Content[0].Column}
			walkPositions(n.Content[0], off, "", ps)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if prefix != "" {
				p = prefix + "." + k.Value
			}
			ps[p] = Position{Line: off + k.Line, Column: k.Column}
			walkPositions(v, off, p, ps)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := prefix + "[" + strconv.Itoa(i) + "]"
			ps[p] = Position{Line: off + v.Line, Column: v.Column}
			walkPositions(v, off, p, ps)
		}
	}
}
