package evidence

import (
	"fmt"
	"path"
	"strings"

	"signet.dev/signet/internal/gitobj"
)

// maxPathLen bounds a path given to the store.
const maxPathLen = 1024

// splitPath checks that p is a clean relative slash-separated path whose
// elements Git and every checkout can hold, and splits it.
func splitPath(p string) ([]string, error) {
	if p == "" || len(p) > maxPathLen {
		return nil, fmt.Errorf("%w: %q: empty or longer than %d bytes", ErrInvalidPath, p, maxPathLen)
	}
	if path.Clean(p) != p || strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%w: %q: not a clean relative path", ErrInvalidPath, p)
	}
	parts := strings.Split(p, "/")
	for _, e := range parts {
		if e == "." || e == ".." || strings.EqualFold(e, ".git") {
			return nil, fmt.Errorf("%w: %q: element %q is not allowed", ErrInvalidPath, p, e)
		}
		for _, c := range []byte(e) {
			if c < 0x20 || c == 0x7f || c == '\\' {
				return nil, fmt.Errorf("%w: %q: control character or backslash in %q", ErrInvalidPath, p, e)
			}
		}
	}
	return parts, nil
}

// newChangeTree checks the paths of the files one Append adds and returns
// them as a tree of directories, ErrInvalidPath when a path is not one
// splitPath accepts or names a file twice, or both a file and a directory.
func newChangeTree(files []File) (*gitobj.Changes, error) {
	root := &gitobj.Changes{}
	for _, f := range files {
		parts, err := splitPath(f.Path)
		if err != nil {
			return nil, err
		}
		n := root
		for i, name := range parts[:len(parts)-1] {
			if _, ok := n.Files[name]; ok {
				return nil, fmt.Errorf("%w: %q: %s is also a file in this append", ErrInvalidPath, f.Path, path.Join(parts[:i+1]...))
			}
			if n.Dirs == nil {
				n.Dirs = map[string]*gitobj.Changes{}
			}
			c := n.Dirs[name]
			if c == nil {
				c = &gitobj.Changes{}
				n.Dirs[name] = c
			}
			n = c
		}
		leaf := parts[len(parts)-1]
		if _, ok := n.Files[leaf]; ok {
			return nil, fmt.Errorf("%w: %q appears twice in this append", ErrInvalidPath, f.Path)
		}
		if _, ok := n.Dirs[leaf]; ok {
			return nil, fmt.Errorf("%w: %q is also a directory in this append", ErrInvalidPath, f.Path)
		}
		if n.Files == nil {
			n.Files = map[string][]byte{}
		}
		n.Files[leaf] = f.Data
	}
	return root, nil
}
