package specs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
)

// APIGroup is the API group of every signet kind. A document in this group
// is a signet document even when its version or kind is wrong, so that a
// typo is reported instead of the document being skipped.
const APIGroup = "signet.dev"

// ParseDocuments splits data, the contents of the spec file named file, into
// YAML documents and parses each with ParseDocument. It returns the signet
// objects found and a finding for every bad document, by its 0-based index.
// Data over MaxSpecFileBytes is refused whole, before parsing. A YAML syntax
// error ends the file: the documents after it cannot be located.
func ParseDocuments(file string, data []byte) ([]*Object, []Finding) {
	if len(data) > MaxSpecFileBytes {
		return nil, []Finding{tooLarge(file, -1, int64(len(data)))}
	}
	var objs []*Object
	var findings []Finding
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			findings = append(findings, yamlFinding(file, i, 0, err))
			break
		}
		o, _, fs := parseNode(file, i, 0, &n)
		findings = append(findings, fs...)
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs, findings
}

// ParseDocument parses one YAML document as LoadDocuments returns it. It
// returns the signet object, or nil with no findings for a document that is
// not a signet kind (DESIGN §2 reads only signet documents), or nil with
// findings for a bad signet document. Aliases and anchors are refused on the
// node tree, before anything is decoded, so no alias is ever expanded.
func ParseDocument(doc SourceDocument) (*Object, []Finding) {
	o, _, fs := parseSource(doc)
	return o, fs
}

// parseSource is ParseDocument that also returns what a bad signet document
// claims to be (see parseNode).
func parseSource(doc SourceDocument) (*Object, claim, []Finding) {
	if len(doc.Data) > MaxSpecFileBytes {
		return nil, claim{}, []Finding{tooLarge(doc.File, doc.Index, int64(len(doc.Data)))}
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc.Data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, claim{}, nil
		}
		return nil, claim{}, []Finding{yamlFinding(doc.File, doc.Index, lineOffset(doc), err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, claim{}, []Finding{{File: doc.File, Document: doc.Index, Line: doc.Line, Column: min(doc.Line, 1), Message: "holds more than one YAML document"}}
	}
	o, cl, fs := parseNode(doc.File, doc.Index, lineOffset(doc), &n)
	if doc.Origin != nil {
		o, fs = doc.Origin.remap(o, fs)
	}
	return o, cl, fs
}

// lineOffset is how many lines of doc.File come before doc.Data.
func lineOffset(doc SourceDocument) int { return max(doc.Line-1, 0) }

// yamlLineRE finds the line yaml.v3 names in a syntax error.
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlFinding is the finding of a YAML syntax error, at the line the
// parser names (relative to the document, which starts after off lines).
func yamlFinding(file string, index, off int, err error) Finding {
	f := Finding{File: file, Document: index, Message: "YAML: " + yamlMessage(err)}
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, aerr := strconv.Atoi(m[1]); aerr == nil {
			f.Line, f.Column = off+n, 1
			f.Message = "YAML: " + strings.TrimPrefix(err.Error(), m[0])
		}
	}
	return f
}

func tooLarge(file string, doc int, size int64) Finding {
	return Finding{File: file, Document: doc, Message: fmt.Sprintf("is %d bytes, over the %d-byte limit of a spec file", size, MaxSpecFileBytes)}
}

func yamlMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// parseNode decodes one document node into a signet object. For a signet
// document with findings it also returns the kind/name reference the
// document claims (when metadata.name is readable), so that references to
// it are not reported as missing on top of its own findings.
func parseNode(file string, index, off int, n *yaml.Node) (*Object, claim, []Finding) {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, claim{}, nil
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, claim{}, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, claim{}, nil // not an object, so not a signet kind
	}
	apiVersion, kind := scalarField(n, "apiVersion"), scalarField(n, "kind")
	group, _, _ := strings.Cut(apiVersion, "/")
	if group != APIGroup && !isKind(kind) {
		return nil, claim{}, nil
	}
	d := &decoder{file: file, index: index, off: off, positions: positions{}}
	d.positions[""] = d.pos(n)
	switch {
	case apiVersion != APIVersion:
		d.addf(n, "apiVersion", "%q is not %s", apiVersion, APIVersion)
		return nil, claimed(kind, n), d.findings
	case !isKind(kind):
		d.addf(n, "kind", "%q is not a signet kind (%s)", kind, strings.Join(Kinds, ", "))
		return nil, claimed(kind, n), d.findings
	}
	o := &Object{Kind: kind, Source: Source{File: file, Index: index, Line: d.positions[""].Line}, positions: d.positions}
	var target any
	switch kind {
	case KindProfile:
		o.Profile = &CertificationProfile{}
		target = o.Profile
	case KindRequest:
		o.Request = &CertificationRequest{}
		target = o.Request
	case KindStanding:
		o.Standing = &StandingCertification{}
		target = o.Standing
	}
	v := d.value(n, reflect.TypeOf(target).Elem(), "")
	if len(d.findings) > 0 {
		return nil, claimed(kind, n), d.findings
	}
	b, err := json.Marshal(v)
	if err != nil {
		d.addf(n, "", "cannot convert to JSON: %v", err)
		return nil, claimed(kind, n), d.findings
	}
	jd := json.NewDecoder(bytes.NewReader(b))
	jd.DisallowUnknownFields()
	if err := jd.Decode(target); err != nil {
		d.addf(n, "", "%v", err)
		return nil, claimed(kind, n), d.findings
	}
	switch kind {
	case KindProfile:
		o.Name = o.Profile.Metadata.Name
		o.Canonical, err = CanonicalProfile(o.Profile)
	case KindRequest:
		o.Name = o.Request.Metadata.Name
		o.Canonical, err = CanonicalRequest(o.Request)
	case KindStanding:
		o.Name = o.Standing.Metadata.Name
		o.Canonical, err = CanonicalStanding(o.Standing)
	}
	if err != nil {
		d.addf(n, "", "%v", err)
		return nil, claimed(kind, n), d.findings
	}
	o.Digest = DigestOf(o.Canonical)
	return o, claim{}, nil
}

// claim is what a signet document that did not parse says it is, as far as
// it can be read: its reference ("kind/name", empty when metadata.name is
// unreadable) and, for a profile, its bundle path.
type claim struct {
	ref        string
	bundlePath string
}

func claimed(kind string, n *yaml.Node) claim {
	var c claim
	if name := scalarField(mappingField(n, "metadata"), "name"); name != "" {
		c.ref = kind + "/" + name
	}
	if kind == KindProfile {
		c.bundlePath = scalarField(mappingField(mappingField(n, "spec"), "bundle"), "path")
	}
	return c
}

// mappingField returns the mapping value of key in mapping m, or nil.
func mappingField(m *yaml.Node, key string) *yaml.Node {
	if m == nil {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k, v := m.Content[i], m.Content[i+1]; k.Kind == yaml.ScalarNode && k.Value == key && v.Kind == yaml.MappingNode {
			return v
		}
	}
	return nil
}

// scalarField returns the value of a top-level scalar key of m, or "".
func scalarField(m *yaml.Node, key string) string {
	if m == nil {
		return ""
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == key && v.Kind == yaml.ScalarNode {
			return v.Value
		}
	}
	return ""
}

// decoder walks a YAML node tree against a Go type, collecting a finding for
// every unknown field, duplicate key, alias, anchor, custom tag and value of
// the wrong type, and builds the JSON value of the tree as it goes.
type decoder struct {
	file     string
	index    int
	off      int // lines of file before the document
	findings []Finding
	// positions records where each field path is written.
	positions positions
}

// pos is where n is written in the file.
func (d *decoder) pos(n *yaml.Node) Position {
	return Position{Line: d.off + n.Line, Column: n.Column}
}

func (d *decoder) addf(n *yaml.Node, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p := d.pos(n)
	d.findings = append(d.findings, Finding{File: d.file, Document: d.index, Line: p.Line, Column: p.Column, Field: field, Message: msg})
}

var (
	secondsType  = reflect.TypeOf(Seconds(0))
	quantityType = reflect.TypeOf(resource.Quantity{})
	intRE        = regexp.MustCompile(`^-?[0-9]+$`)
	plainKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// value returns the JSON value of n as type t, or nil after adding findings.
func (d *decoder) value(n *yaml.Node, t reflect.Type, path string) any {
	if n.Kind == yaml.AliasNode {
		d.addf(n, path, "YAML aliases are not allowed (*%s)", n.Value)
		return nil
	}
	if n.Anchor != "" {
		d.addf(n, path, "YAML anchors are not allowed (&%s)", n.Anchor)
		return nil
	}
	tag := n.ShortTag()
	switch tag {
	case "!!str", "!!int", "!!bool", "!!null", "!!map", "!!seq", "!!float", "!!timestamp":
	default:
		d.addf(n, path, "YAML tag %s is not allowed", n.Tag)
		return nil
	}
	if tag == "!!null" {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case secondsType:
		if n.Kind != yaml.ScalarNode {
			d.addf(n, path, "must be whole seconds like \"600s\", not a %s", kindName(n))
			return nil
		}
		if tag == "!!int" {
			d.addf(n, path, "%s is not whole seconds (%q)", n.Value, n.Value+"s")
			return nil
		}
		if _, err := ParseSeconds(n.Value); err != nil {
			d.addf(n, path, "%v", err)
			return nil
		}
		return n.Value
	case quantityType:
		if n.Kind != yaml.ScalarNode || (tag != "!!str" && tag != "!!int" && tag != "!!float") {
			d.addf(n, path, "must be a quantity like \"16Gi\" or 8, not a %s", kindName(n))
			return nil
		}
		if _, err := resource.ParseQuantity(n.Value); err != nil {
			d.addf(n, path, "%q is not a quantity: %v", n.Value, err)
			return nil
		}
		return n.Value
	}
	switch t.Kind() {
	case reflect.Struct:
		return d.object(n, t, path)
	case reflect.Map:
		return d.mapping(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.addf(n, path, "must be a list, not a %s", kindName(n))
			return nil
		}
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			ep := fmt.Sprintf("%s[%d]", path, i)
			d.positions[ep] = d.pos(c)
			out = append(out, d.value(c, t.Elem(), ep))
		}
		return out
	case reflect.String:
		// A plain timestamp (notBefore: 2026-01-01T00:00:00Z) is its text.
		if n.Kind != yaml.ScalarNode || (tag != "!!str" && tag != "!!timestamp") {
			d.addf(n, path, "must be a string, not a %s%s", kindName(n), quoteHint(n))
			return nil
		}
		return n.Value
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.Kind != yaml.ScalarNode || tag != "!!int" || !intRE.MatchString(n.Value) {
			d.addf(n, path, "must be a decimal integer, not a %s%s", kindName(n), valueHint(n))
			return nil
		}
		v, err := strconv.ParseInt(n.Value, 10, 32)
		if err != nil {
			d.addf(n, path, "%s is out of range", n.Value)
			return nil
		}
		return v
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || tag != "!!bool" {
			d.addf(n, path, "must be true or false, not a %s%s", kindName(n), valueHint(n))
			return nil
		}
		v, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			d.addf(n, path, "%q is not true or false", n.Value)
			return nil
		}
		return v
	}
	d.addf(n, path, "cannot decode into %s", t)
	return nil
}

// object decodes a mapping node into the fields of struct type t.
func (d *decoder) object(n *yaml.Node, t reflect.Type, path string) any {
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "must be a mapping, not a %s", kindName(n))
		return nil
	}
	fields := map[string]reflect.Type{}
	collectFields(t, fields)
	out := map[string]any{}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, ok := d.key(k, path, seen)
		if !ok {
			continue
		}
		fp := join(path, key)
		d.positions[fp] = d.pos(k)
		ft, known := fields[key]
		if !known {
			if near := nearest(key, slices.Collect(maps.Keys(fields))); near != "" {
				d.addf(k, fp, "unknown field; did you mean %q?", near)
			} else {
				d.addf(k, fp, "unknown field")
			}
			continue
		}
		if val := d.value(v, ft, fp); val != nil {
			out[key] = val
		}
	}
	return out
}

// mapping decodes a mapping node into a map with string keys.
func (d *decoder) mapping(n *yaml.Node, t reflect.Type, path string) any {
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "must be a mapping, not a %s", kindName(n))
		return nil
	}
	out := map[string]any{}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, ok := d.key(k, path, seen)
		if !ok {
			continue
		}
		d.positions[join(path, key)] = d.pos(k)
		if val := d.value(v, t.Elem(), join(path, key)); val != nil {
			out[key] = val
		}
	}
	return out
}

// key checks one mapping key: a plain string, not a merge key, not seen.
func (d *decoder) key(k *yaml.Node, path string, seen map[string]bool) (string, bool) {
	if k.Kind == yaml.AliasNode || k.Anchor != "" {
		d.addf(k, path, "YAML aliases and anchors are not allowed")
		return "", false
	}
	if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
		d.addf(k, path, "mapping key %q is not a plain string", k.Value)
		return "", false
	}
	if k.ShortTag() != "!!str" {
		d.addf(k, path, "mapping key %s must be a string%s", k.Value, quoteHint(k))
		return "", false
	}
	if seen[k.Value] {
		d.addf(k, join(path, k.Value), "duplicate key")
		return "", false
	}
	seen[k.Value] = true
	return k.Value, true
}

// collectFields maps the JSON names of t's fields to their types, with the
// fields of embedded structs promoted as encoding/json does.
func collectFields(t reflect.Type, out map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			collectFields(f.Type, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}

// nearest returns the known name closest to name by edit distance, when
// it is close enough to be a typo (at most a third of the name's length,
// and at most 3 edits; case counts as one edit per letter), else "".
func nearest(name string, known []string) string {
	slices.Sort(known)
	best, bestD := "", min(3, max(1, len(name)/3))+1
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, counting an
// adjacent transposition ("deadlien") as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// join appends key to a field path: a.b, or a["nvidia.com/gpu"] for keys
// that are not plain identifiers.
func join(path, key string) string {
	if !plainKeyRE.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	switch n.ShortTag() {
	case "!!int":
		return "number"
	case "!!float":
		return "number"
	case "!!bool":
		return "boolean"
	case "!!str":
		return "string"
	}
	return "value"
}

func valueHint(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return fmt.Sprintf(" (%q)", n.Value)
	}
	return ""
}

func quoteHint(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return fmt.Sprintf(" (%s; quote it if a string is meant)", n.Value)
	}
	return ""
}

// Findings is an error made of findings, one per line.
type Findings []Finding

func (fs Findings) Error() string {
	lines := make([]string, len(fs))
	for i, f := range fs {
		lines[i] = f.String()
	}
	return strings.Join(lines, "\n")
}

// DecodeStrict decodes data, one YAML document of the file named file,
// into target (a pointer to a struct with JSON field tags) with the rules
// and findings of spec documents: unknown fields (with the nearest known
// name), duplicate keys, anchors, aliases, custom tags and values of the
// wrong type are refused, each finding at its file:line:column with its
// field path. It is the one strict reader of every file signet reads
// (specs, ReconcilerConfig, TrustPolicy).
func DecodeStrict(file string, data []byte, target any) Findings {
	d := &decoder{file: file, index: -1, positions: positions{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			d.addf(&yaml.Node{}, "", "is empty")
			return d.findings
		}
		return Findings{yamlFinding(file, -1, 0, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		d.addf(&extra, "", "holds more than one YAML document")
		return d.findings
	}
	root := &n
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		d.addf(root, "", "must be a mapping, not a %s", kindName(root))
		return d.findings
	}
	v := d.value(root, reflect.TypeOf(target).Elem(), "")
	if len(d.findings) > 0 {
		return d.findings
	}
	b, err := json.Marshal(v)
	if err != nil {
		d.addf(root, "", "cannot convert to JSON: %v", err)
		return d.findings
	}
	jd := json.NewDecoder(bytes.NewReader(b))
	jd.DisallowUnknownFields()
	if err := jd.Decode(target); err != nil {
		d.addf(root, "", "%v", err)
		return d.findings
	}
	return nil
}
