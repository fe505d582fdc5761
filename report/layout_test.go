package report

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestServedPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"index.html", true},
		{"gens/0123456789abcdef/index.html", true},
		{"gens/0123456789abcdef/runs/c/r.html", true},
		{"current/manifest.json", true},
		{".lock", false},
		{"manifest.json", false},
		{"runs-1.html", false},
		{"current", false},
		{"current.tmp/index.html", false},
		{"gens", false},
		{"gens/0123456789abcdef", false},
		{"gens/.tmp-1/index.html", false},
		{"gens/0123456789ABCDEF/index.html", false},
		{"gens/0123456789abcde/index.html", false},
		{"gens/0123456789abcdef/.manifest", false},
		{"current/runs/.tmp-1", false},
		{"current/../.lock", false},
		{"/index.html", false},
		{"current/runs/", false},
		{"", false},
	} {
		assert.Equal(t, tc.want, ServedPath(tc.name), "%q", tc.name)
	}
}

// FuzzServedPath: whatever the request, a path ServedPath allows is a
// valid path with no dot element, and is the entry or lies inside a
// generation.
func FuzzServedPath(f *testing.F) {
	for _, s := range []string{"index.html", ".lock", "gens/0123456789abcdef/a.html", "current/x", "current/../.lock", "gens/.tmp-1/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !ServedPath(name) {
			return
		}
		if !fs.ValidPath(name) {
			t.Fatalf("%q: not a valid path, served", name)
		}
		elems := strings.Split(name, "/")
		for _, e := range elems {
			if strings.HasPrefix(e, ".") {
				t.Fatalf("%q: a dot element, served", name)
			}
		}
		if name != EntryFile && elems[0] != CurrentLink && (elems[0] != GenerationsDir || !isGenerationID(elems[1]) || len(elems) < 3) {
			t.Fatalf("%q: outside every generation, served", name)
		}
	})
}
