// Package schemagen generates, from signet's Go types, the JSON Schemas of
// the four kinds signet reads (CertificationProfile, CertificationRequest,
// TrustPolicy, ReconcilerConfig) and their field reference in Markdown.
// The field descriptions are the Go doc comments of the fields. A test in
// this package writes schemas/ and docs/reference/ with -update and fails
// when they drift from the types.
//
// The schemas state types, field names (additionalProperties: false, as
// signet's strict reader refuses unknown fields), list and map shapes,
// constant apiVersion and kind, and the pattern of whole seconds. They do
// not state what only signet's validation knows (digests matching bundles,
// references between objects, thresholds): `signet validate` remains the
// authority, the schemas are for editors and kubeconform.
package schemagen

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// Kind is one kind signet reads and the Go type it is decoded into.
type Kind struct {
	Kind string
	Type reflect.Type
	// About is the kind's one-paragraph description.
	About string
}

// Kinds are the kinds signet reads, in reference order.
var Kinds = []Kind{
	{specs.KindProfile, reflect.TypeFor[specs.CertificationProfile](), "What a certification is: a digest-pinned bundle of scripts and the ordered checks that run them (docs/design.md §2)."},
	{specs.KindRequest, reflect.TypeFor[specs.CertificationRequest](), "Which nodes to certify with which profile, once (docs/design.md §2)."},
	{specs.KindStanding, reflect.TypeFor[specs.StandingCertification](), "A pool kept certified with one profile: approved once, it fires runs of due nodes within a disruption budget (docs/proposals/standing-certification.md; the reconciler does not act on it yet)."},
	{signing.TrustPolicyKind, reflect.TypeFor[signing.TrustPolicyDocument](), "The keys signet trusts, who may approve, how many approvals each kind and action needs, and who signs evidence (docs/trust-policy.md)."},
	{reconciler.KindConfig, reflect.TypeFor[reconciler.Config](), "The reconciler's configuration: where specs and evidence live, its key and trust policy, its listeners and backends (docs/deploy.md)."},
}

// FileName is the schema's file name under schemas/, the one kubeconform's
// -schema-location 'schemas/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json'
// finds.
func FileName(kind string) string {
	_, version, _ := strings.Cut(specs.APIVersion, "/")
	return strings.ToLower(kind) + "_" + version + ".json"
}

// Docs maps "Type.Field" (Go names) to the field's doc comment, read from
// the source of the packages in dirs.
type Docs map[string]string

// ReadDocs parses the non-test Go files of dirs for struct field comments.
func ReadDocs(dirs ...string) (Docs, error) {
	d := Docs{}
	for _, dir := range dirs {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return nil, err
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return true
				}
				for _, fld := range st.Fields.List {
					text := fld.Doc.Text()
					if text == "" {
						text = fld.Comment.Text()
					}
					for _, id := range fld.Names {
						if text != "" {
							d[ts.Name.Name+"."+id.Name] = strings.Join(strings.Fields(text), " ")
						}
					}
				}
				return true
			})
		}
	}
	return d, nil
}

var (
	secondsType  = reflect.TypeFor[specs.Seconds]()
	quantityType = reflect.TypeFor[resource.Quantity]()
)

// Schema returns k's JSON Schema (draft-07) as indented JSON.
func Schema(k Kind, docs Docs) ([]byte, error) {
	s := schemaOf(k.Type, docs)
	props := s["properties"].(map[string]any)
	props["apiVersion"] = map[string]any{"const": specs.APIVersion, "description": "Always " + specs.APIVersion + "."}
	props["kind"] = map[string]any{"const": k.Kind, "description": "Always " + k.Kind + "."}
	s["required"] = []string{"apiVersion", "kind"}
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	s["$id"] = "https://signet.dev/schemas/" + FileName(k.Kind)
	s["title"] = k.Kind
	s["description"] = k.About
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func schemaOf(t reflect.Type, docs Docs) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case secondsType:
		return map[string]any{"type": "string", "pattern": "^[0-9]+s$", "description": "Whole seconds, like \"600s\"."}
	case quantityType:
		return map[string]any{"type": []string{"string", "integer", "number"}, "description": "A Kubernetes quantity, like \"16Gi\" or 8."}
	}
	switch t.Kind() {
	case reflect.Struct:
		props := map[string]any{}
		for _, f := range fields(t) {
			p := schemaOf(f.Type, docs)
			if text := docs[f.Owner+"."+f.GoName]; text != "" {
				p["description"] = text
			}
			props[f.Name] = p
		}
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), docs)}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), docs)}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32:
		return map[string]any{"type": "integer"}
	}
	panic(fmt.Sprintf("schemagen: no schema for %s", t))
}

// Field is one JSON field of a struct.
type Field struct {
	Name   string // JSON name
	GoName string
	Owner  string // the Go type that declares it
	Type   reflect.Type
}

// fields returns t's JSON fields, the fields of embedded structs promoted
// as encoding/json does, sorted by name.
func fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, fields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, Field{Name: name, GoName: f.Name, Owner: t.Name(), Type: f.Type})
	}
	slices.SortFunc(out, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Reference returns the Markdown field reference of k: every field path,
// its type and its description.
func Reference(k Kind, docs Docs) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n<!-- Generated by internal/tools/schemagen from the Go types; do not edit. -->\n\n%s\n\n", k.Kind, k.About)
	fmt.Fprintf(&b, "`apiVersion: %s`, `kind: %s`. JSON Schema: [schemas/%s](../../schemas/%s).\n\n", specs.APIVersion, k.Kind, FileName(k.Kind), FileName(k.Kind))
	b.WriteString("| Field | Type | Description |\n|---|---|---|\n")
	var walk func(t reflect.Type, prefix string, depth int)
	walk = func(t reflect.Type, prefix string, depth int) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == quantityType || depth > 8 {
			return
		}
		for _, f := range fields(t) {
			if prefix == "" && (f.Name == "apiVersion" || f.Name == "kind") {
				continue
			}
			path := prefix + f.Name
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			desc := docs[f.Owner+"."+f.GoName]
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", path, typeName(ft), strings.ReplaceAll(desc, "|", "\\|"))
			switch ft.Kind() {
			case reflect.Slice:
				walk(ft.Elem(), path+"[].", depth+1)
			case reflect.Map:
				walk(ft.Elem(), path+".<key>.", depth+1)
			default:
				walk(ft, path+".", depth+1)
			}
		}
	}
	walk(k.Type, "", 0)
	return []byte(b.String())
}

func typeName(t reflect.Type) string {
	switch t {
	case secondsType:
		return "seconds (`\"600s\"`)"
	case quantityType:
		return "quantity"
	}
	switch t.Kind() {
	case reflect.Struct:
		return "object"
	case reflect.Map:
		return "map of " + typeName(derefType(t.Elem()))
	case reflect.Slice:
		return "list of " + typeName(derefType(t.Elem()))
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32:
		return "integer"
	case reflect.Bool:
		return "boolean"
	}
	return "string"
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}
