package mutate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Mutation breaks one safety rule with one or more exact text edits and names
// the test that must catch it.
type Mutation struct {
	// ID names the mutation in the table and for -only (a DNS-label-like word).
	ID string `yaml:"id"`
	// Rule is the safety rule the mutation breaks, in one sentence.
	Rule string `yaml:"rule"`
	// File, Target and Replacement are the edit: the exact text Target,
	// which must occur exactly once in File (relative to the repository
	// root), becomes Replacement.
	File        string `yaml:"file"`
	Target      string `yaml:"target"`
	Replacement string `yaml:"replacement"`
	// Also holds further edits when one rule is guarded in more than one
	// place (an empty File means the mutation's File). Each target must
	// occur exactly once in the file as the edits before it left it.
	Also []Edit `yaml:"also,omitempty"`
	// Test is the one test that must fail.
	Test Test `yaml:"test"`
	// Assert is a substring of the failing test's output that proves the
	// right assertion failed (an assert message, an expected value).
	Assert string `yaml:"assert"`
}

// Edit is one exact text replacement in one file.
type Edit struct {
	File        string `yaml:"file"`
	Target      string `yaml:"target"`
	Replacement string `yaml:"replacement"`
}

// Test names a package and a -run regular expression.
type Test struct {
	Pkg string `yaml:"pkg"`
	Run string `yaml:"run"`
	// Race runs the test with the race detector, for a rule whose breach
	// is a data race that only -race reports.
	Race bool `yaml:"race,omitempty"`
}

// Edits returns the mutation's edits in order, with file names filled in.
func (m *Mutation) Edits() []Edit {
	out := []Edit{{File: m.File, Target: m.Target, Replacement: m.Replacement}}
	for _, e := range m.Also {
		if e.File == "" {
			e.File = m.File
		}
		out = append(out, e)
	}
	return out
}

var idRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// Validate reports what is missing or wrong in m itself, without reading
// any file.
func (m *Mutation) Validate() error {
	var errs []error
	if !idRE.MatchString(m.ID) {
		errs = append(errs, fmt.Errorf("id %q is not lowercase letters, digits and dashes", m.ID))
	}
	if strings.TrimSpace(m.Rule) == "" {
		errs = append(errs, errors.New("rule is empty"))
	}
	for i, e := range m.Edits() {
		where := "edit"
		if i > 0 {
			where = fmt.Sprintf("also[%d]", i-1)
		}
		switch {
		case e.File == "":
			errs = append(errs, fmt.Errorf("%s: file is empty", where))
		case filepath.IsAbs(e.File) || !filepath.IsLocal(e.File):
			errs = append(errs, fmt.Errorf("%s: file %q is not a path inside the repository", where, e.File))
		}
		if e.Target == "" {
			errs = append(errs, fmt.Errorf("%s: target is empty", where))
		}
		if e.Target == e.Replacement {
			errs = append(errs, fmt.Errorf("%s: replacement equals target", where))
		}
	}
	if m.Test.Pkg == "" || m.Test.Run == "" {
		errs = append(errs, errors.New("test.pkg and test.run are both required"))
	} else if _, err := regexp.Compile(m.Test.Run); err != nil {
		errs = append(errs, fmt.Errorf("test.run: %w", err))
	}
	if strings.TrimSpace(m.Assert) == "" {
		errs = append(errs, errors.New("assert is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mutation %q: %w", m.ID, err)
	}
	return nil
}

// ParseList parses a YAML list of mutations strictly (unknown fields are
// errors) and validates each; ids must be unique.
func ParseList(data []byte) ([]Mutation, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var list []Mutation
	if err := dec.Decode(&list); err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errors.New("no mutations")
	}
	seen := map[string]bool{}
	var errs []error
	for i := range list {
		m := &list[i]
		if err := m.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[m.ID] {
			errs = append(errs, fmt.Errorf("mutation %q: duplicate id", m.ID))
		}
		seen[m.ID] = true
	}
	return list, errors.Join(errs...)
}

// LoadList reads and parses the mutation list at path.
func LoadList(path string) ([]Mutation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	list, err := ParseList(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return list, nil
}

// Count returns how many times target occurs in data, without overlaps.
func Count(data []byte, target string) int {
	return bytes.Count(data, []byte(target))
}

// apply returns src with each edit for file applied in order, or a
// *BrokenError when a target does not occur exactly once.
func apply(src []byte, file string, edits []Edit) ([]byte, error) {
	out := src
	for _, e := range edits {
		if e.File != file {
			continue
		}
		switch n := Count(out, e.Target); n {
		case 1:
		case 0:
			return nil, &BrokenError{File: file, Reason: fmt.Sprintf("target %q does not occur", short(e.Target))}
		default:
			return nil, &BrokenError{File: file, Reason: fmt.Sprintf("target %q occurs %d times", short(e.Target), n)}
		}
		out = bytes.Replace(out, []byte(e.Target), []byte(e.Replacement), 1)
	}
	return out, nil
}

func short(s string) string {
	s, _, cut := strings.Cut(s, "\n")
	if len(s) > 60 {
		s, cut = s[:60], true
	}
	if cut {
		s += "…"
	}
	return s
}

// BrokenError says a mutation cannot be applied as written.
type BrokenError struct {
	File   string
	Reason string
}

func (e *BrokenError) Error() string { return e.File + ": " + e.Reason }

// goOnly reports whether every file m edits is Go source, which the go
// command reads through -overlay.
func (m *Mutation) goOnly() bool { return m.notGo() == "" }

// editsGo reports whether any file m edits is Go source.
func (m *Mutation) editsGo() bool {
	for _, e := range m.Edits() {
		if strings.HasSuffix(e.File, ".go") {
			return true
		}
	}
	return false
}

// notGo returns the first file m edits that is not Go source, or "".
func (m *Mutation) notGo() string {
	for _, e := range m.Edits() {
		if !strings.HasSuffix(e.File, ".go") {
			return e.File
		}
	}
	return ""
}
