package corpus

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFormatPattern(t *testing.T) {
	tests := []struct {
		format, msg string
		match       bool
	}{
		{"%q is not a DNS label: %s", `metadata.name: "A_B" is not a DNS label: a lowercase RFC 1123 label`, true},
		{"%d is less than 1", "spec.participants.min: 0 is less than 1", true},
		{"%d is less than 1", "spec.participants.min: 0 is more than 1", false},
		{"100%% sure (%s)", "100% sure (x)", true},
		{"a.b", "axb", false},
	}
	for _, tt := range tests {
		re := FormatPattern(tt.format)
		assert.Equal(t, tt.match, Reason{Pattern: mustCompile(t, re)}.Matches([]string{tt.msg}), "%q ~ %q", tt.format, tt.msg)
	}
}

func TestScan(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import ("errors"; "fmt")

var ErrGone = errors.New("it is gone")
var errPrivate = errors.New("not a sentinel")

const RuleX = "rule-x"

type r struct{}

func (r) addf(field, format string, args ...any) {}

func f(x r) error {
	x.addf("spec.a", "%q is bad", 1)
	x.addf("spec.b", "%q is bad", 2)
	return fmt.Errorf("%w: wrapped", ErrGone)
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644))
	rs, err := Scan(Source{Dir: dir, Formats: map[string]int{"x.addf": 1}, Sentinels: true, ConstPrefix: "Rule"})
	require.NoError(t, err)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	assert.Equal(t, []string{"%q is bad", "it is gone", "rule-x"}, ids)
	unc := Uncovered(rs, []Entry{{Input: "a", Reason: "it is gone"}})
	assert.Len(t, unc, 2)
}

func TestReadArchive(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.txtar")
	require.NoError(t, os.WriteFile(file, []byte("comment\n-- a.yaml --\nx: 1\n-- l@symlink --\na.yaml\n-- big@repeat=10 --\nab\n-- d/f@copies=2 --\nz\n-- e@dir --\n"), 0o644))
	fsys, err := ReadArchive(file, nil)
	require.NoError(t, err)
	assert.Equal(t, "x: 1\n", string(fsys["a.yaml"].Data))
	assert.Equal(t, fs.ModeSymlink, fsys["l"].Mode.Type())
	assert.Equal(t, "ab\nab\nab\na", string(fsys["big"].Data))
	assert.Contains(t, fsys, "d/f-0")
	assert.Contains(t, fsys, "d/f-1")
	assert.True(t, fsys["e"].Mode.IsDir())
}

func TestReadInputTemplate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "x.json.tmpl")
	require.NoError(t, os.WriteFile(file, []byte(`{{- $s := printf "[%s]" (repeat 3 "1" ",") -}}
{"a":{{$s}},"b":"{{base64 $s}}"}`), 0o644))
	name, b, err := ReadInput(file)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(filepath.Dir(file), "x.json"), name)
	assert.Equal(t, `{"a":[1,1,1],"b":"WzEsMSwxXQ=="}`, string(b))
}

func TestWriteTree(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.txtar")
	require.NoError(t, os.WriteFile(file, []byte("-- a/f --\nx\n-- l@symlink --\na/f\n-- p@fifo --\n-- e@dir --\n"), 0o644))
	fsys, err := ReadArchive(file, nil)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, WriteTree(dir, fsys))
	b, err := os.ReadFile(filepath.Join(dir, "l"))
	require.NoError(t, err)
	assert.Equal(t, "x\n", string(b))
	for name, want := range map[string]fs.FileMode{"a/f": 0, "l": fs.ModeSymlink, "p": fs.ModeNamedPipe, "e": fs.ModeDir} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, fi.Mode().Type(), name)
	}
}

func mustCompile(t *testing.T, re string) *regexp.Regexp {
	t.Helper()
	r, err := regexp.Compile(re)
	require.NoError(t, err)
	return r
}
