// Package corpus ties a package's checked-in bad inputs to the rejection
// reasons its source states. The reasons are not kept in a hand-written
// list: Scan reads them from the package's Go source (the message literals
// of its sentinel errors, the format literals of the calls that report a
// finding or a verification failure, and its rule-id constants), so a new
// reason added to the code shows up as uncovered until the corpus holds an
// input that reaches it.
//
// A corpus is a directory holding the inputs and a manifest.json that maps
// each input to the reason it must produce. The package's corpus test runs
// every input through the real parser or validator and asserts the
// reason (Check), and lists the reasons no input reaches (Uncovered).
package corpus

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Reason is one way a package rejects input.
type Reason struct {
	// ID is the literal as written in the source: a sentinel's message,
	// a format string, or a rule id.
	ID string
	// Where is the first place it is stated (file:line).
	Where string
	// Pattern matches the messages it produces.
	Pattern *regexp.Regexp
}

// Source says where a package states its reasons.
type Source struct {
	// Dir is the package directory; _test.go files are not read.
	Dir string
	// Formats maps a function or method name ("addf"), or a receiver
	// variable and method ("d.addf"), which wins, to the index of its
	// argument that is a format (or message) literal stating a reason.
	Formats map[string]int
	// Sentinels: package-level variables named Err* initialized with
	// errors.New or fmt.Errorf of a literal are reasons.
	Sentinels bool
	// ConstPrefix: string constants whose name has this prefix are rule
	// ids (reasons matched as a whole word at the start of a message).
	ConstPrefix string
	// Ignore lists literals that are not rejection reasons (a format
	// shared by unrelated wrappers, such as "%s").
	Ignore []string
}

// Scan returns the reasons src states, sorted by ID, duplicates merged.
func Scan(src Source) ([]Reason, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, src.Dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		return nil, err
	}
	found := map[string]Reason{}
	add := func(id string, pos token.Pos, pattern string) {
		if id == "" || slices.Contains(src.Ignore, id) {
			return
		}
		if _, ok := found[id]; ok {
			return
		}
		p := fset.Position(pos)
		found[id] = Reason{ID: id, Where: fmt.Sprintf("%s:%d", filepath.Base(p.Filename), p.Line), Pattern: regexp.MustCompile(pattern)}
	}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || (gd.Tok != token.VAR && gd.Tok != token.CONST) {
					continue
				}
				for _, s := range gd.Specs {
					vs := s.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i >= len(vs.Values) {
							continue
						}
						switch {
						case gd.Tok == token.VAR && src.Sentinels && strings.HasPrefix(name.Name, "Err"):
							if msg, ok := sentinelLiteral(vs.Values[i]); ok {
								add(msg, name.Pos(), FormatPattern(msg))
							}
						case gd.Tok == token.CONST && src.ConstPrefix != "" && strings.HasPrefix(name.Name, src.ConstPrefix):
							if lit, ok := stringLiteral(vs.Values[i]); ok {
								add(lit, name.Pos(), `^`+regexp.QuoteMeta(lit)+`\b`)
							}
						}
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var name, qualified string
				switch fn := c.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
					if x, ok := fn.X.(*ast.Ident); ok {
						qualified = x.Name + "." + name
					}
				}
				i, ok := src.Formats[qualified]
				if !ok {
					i, ok = src.Formats[name]
				}
				if !ok || i >= len(c.Args) {
					return true
				}
				if lit, ok := stringLiteral(c.Args[i]); ok {
					add(lit, c.Pos(), FormatPattern(lit))
				}
				return true
			})
		}
	}
	out := make([]Reason, 0, len(found))
	for _, r := range found {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Reason) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// sentinelLiteral returns the literal of errors.New("…") or
// fmt.Errorf("…", …).
func sentinelLiteral(e ast.Expr) (string, bool) {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) == 0 {
		return "", false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || (sel.Sel.Name != "New" && sel.Sel.Name != "Errorf") {
		return "", false
	}
	return stringLiteral(c.Args[0])
}

func stringLiteral(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

var verbRE = regexp.MustCompile(`%[-+# 0-9.*]*[a-zA-Z%]`)

// FormatPattern turns a fmt format into a pattern matching what it
// produces: every verb matches any text.
func FormatPattern(format string) string {
	var b strings.Builder
	last := 0
	for _, m := range verbRE.FindAllStringIndex(format, -1) {
		b.WriteString(regexp.QuoteMeta(format[last:m[0]]))
		if format[m[0]:m[1]] == "%%" {
			b.WriteString("%")
		} else {
			b.WriteString(`(?s:.*?)`)
		}
		last = m[1]
	}
	b.WriteString(regexp.QuoteMeta(format[last:]))
	return b.String()
}

// Entry is one input of a corpus and the reason it must produce.
type Entry struct {
	// Input is a path relative to the corpus directory.
	Input string `json:"input"`
	// Reason is a Reason's ID.
	Reason string `json:"reason"`
	// Note says, where the input alone does not, what is wrong with it.
	Note string `json:"note,omitempty"`
}

// Load reads dir/manifest.json.
func Load(dir string) ([]Entry, error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	var es []Entry
	if err := json.Unmarshal(b, &es); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	return es, nil
}

// Find returns the reason with id.
func Find(reasons []Reason, id string) (Reason, bool) {
	i := slices.IndexFunc(reasons, func(r Reason) bool { return r.ID == id })
	if i < 0 {
		return Reason{}, false
	}
	return reasons[i], true
}

// Matches reports whether one of msgs is produced by r.
func (r Reason) Matches(msgs []string) bool {
	return slices.ContainsFunc(msgs, r.Pattern.MatchString)
}

// Uncovered returns the reasons no entry names, in order.
func Uncovered(reasons []Reason, entries []Entry) []Reason {
	named := map[string]bool{}
	for _, e := range entries {
		named[e.Reason] = true
	}
	var out []Reason
	for _, r := range reasons {
		if !named[r.ID] {
			out = append(out, r)
		}
	}
	return out
}

// Gap is a reason known to have no input yet, and why.
type Gap struct {
	Reason string `json:"reason"`
	Why    string `json:"why"`
}

// RequireCovered lists (t.Log) every reason no entry reaches and fails
// the test for each one, except those dir/uncovered.json owns up to with
// a why. An entry of uncovered.json that is covered now, or that names a
// reason the source no longer states, fails too, so the list only
// shrinks and never hides a new reason.
func RequireCovered(t testing.TB, dir string, reasons []Reason, entries []Entry) {
	t.Helper()
	var gaps []Gap
	b, err := os.ReadFile(filepath.Join(dir, "uncovered.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		t.Fatal(err)
	default:
		if err := json.Unmarshal(b, &gaps); err != nil {
			t.Fatalf("%s: %v", filepath.Join(dir, "uncovered.json"), err)
		}
	}
	owned := map[string]string{}
	for _, g := range gaps {
		owned[g.Reason] = g.Why
		if _, ok := Find(reasons, g.Reason); !ok {
			t.Errorf("uncovered.json names %q, which the source no longer states: remove it", g.Reason)
		}
	}
	unc := Uncovered(reasons, entries)
	t.Logf("%d reasons, %d reached by an input, %d without one", len(reasons), len(reasons)-len(unc), len(unc))
	for _, r := range unc {
		if why, ok := owned[r.ID]; ok {
			t.Logf("no input (owned up to in uncovered.json: %s): %s %q", why, r.Where, r.ID)
			delete(owned, r.ID)
			continue
		}
		t.Errorf("no input reaches %s %q: add one to %s/manifest.json", r.Where, r.ID, dir)
	}
	for id := range owned {
		if _, ok := Find(reasons, id); ok {
			t.Errorf("uncovered.json names %q, which an input reaches now: remove it", id)
		}
	}
}
