package corpus

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing/fstest"
	"text/template"
)

// ReadArchive reads a file tree written as a txtar-style archive: each
// file starts with a line "-- NAME --" and holds the lines up to the next
// such line. A NAME may end with a marker that makes the entry something a
// text file cannot be:
//
//	NAME@symlink     a symbolic link whose target is the (trimmed) content
//	NAME@fifo        a named pipe (content ignored)
//	NAME@repeat=N    the content repeated, then cut, to exactly N bytes
//	NAME@copies=N    N files BASE-0.EXT, BASE-1.EXT, … (NAME is BASE.EXT)
//	                 each holding the content
//	NAME@dir         an empty directory
//
// Text before the first file line is a comment. Files of base are added
// where the archive has no entry of the same name.
func ReadArchive(file string, base fstest.MapFS) (fstest.MapFS, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	fsys := fstest.MapFS{}
	for k, v := range base {
		fsys[k] = v
	}
	var name string
	var data []byte
	flush := func() error {
		if name == "" {
			return nil
		}
		n0, mark, _ := strings.Cut(name, "@")
		n := n0
		f := &fstest.MapFile{Data: data, Mode: 0o644}
		switch {
		case mark == "":
		case mark == "symlink":
			f = &fstest.MapFile{Data: bytes.TrimSpace(data), Mode: fs.ModeSymlink | 0o777}
		case mark == "fifo":
			f = &fstest.MapFile{Mode: fs.ModeNamedPipe | 0o644}
		case mark == "dir":
			f = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
		case strings.HasPrefix(mark, "copies="):
			n, err := strconv.Atoi(strings.TrimPrefix(mark, "copies="))
			if err != nil || n < 1 {
				return fmt.Errorf("%s: %q: bad copies", file, name)
			}
			ext := path.Ext(n0)
			for i := range n {
				fsys[fmt.Sprintf("%s-%d%s", strings.TrimSuffix(n0, ext), i, ext)] = &fstest.MapFile{Data: data, Mode: 0o644}
			}
			return nil
		case strings.HasPrefix(mark, "repeat="):
			size, err := strconv.Atoi(strings.TrimPrefix(mark, "repeat="))
			if err != nil || len(data) == 0 {
				return fmt.Errorf("%s: %q: bad repeat", file, name)
			}
			f.Data = bytes.Repeat(data, size/len(data)+1)[:size]
		default:
			return fmt.Errorf("%s: %q: unknown marker", file, name)
		}
		fsys[n] = f
		return nil
	}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		l := strings.TrimRight(string(line), "\n")
		if strings.HasPrefix(l, "-- ") && strings.HasSuffix(l, " --") && len(l) > 6 {
			if err := flush(); err != nil {
				return nil, err
			}
			name, data = strings.TrimSpace(l[3:len(l)-3]), nil
			continue
		}
		if name != "" {
			data = append(data, line...)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return fsys, nil
}

// ReadInput reads one input file. Two kinds of file stand for an input X
// too large to check in, and ReadInput returns its name (X) with it:
//
//   - X.repeat: its first line is a byte count N, and the input is the rest
//     of the file repeated, then cut, to exactly N bytes (a size bound's
//     input);
//   - X.tmpl: a text/template whose output is the input, with the
//     functions repeat (N copies of a string joined by a separator) and
//     base64 (standard padded encoding), for an input whose structure
//     counts, such as an envelope whose payload holds N subjects.
func ReadInput(file string) (name string, data []byte, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
	}
	if name, ok := strings.CutSuffix(file, ".tmpl"); ok {
		data, err := expand(file, b)
		return name, data, err
	}
	name, ok := strings.CutSuffix(file, ".repeat")
	if !ok {
		return file, b, nil
	}
	first, unit, _ := bytes.Cut(b, []byte("\n"))
	n, err := strconv.Atoi(strings.TrimSpace(string(first)))
	if err != nil || n < 0 || len(unit) == 0 {
		return "", nil, fmt.Errorf("%s: want a byte count on the first line and a unit after it", file)
	}
	return name, bytes.Repeat(unit, n/len(unit)+1)[:n], nil
}

// maxExpanded bounds what a template may produce, so that a typo in a
// count fails the test instead of exhausting memory.
const maxExpanded = 64 << 20

func expand(file string, b []byte) ([]byte, error) {
	funcs := template.FuncMap{
		"repeat": func(n int, s, sep string) (string, error) {
			if n < 0 || int64(n)*int64(len(s)+len(sep)) > maxExpanded {
				return "", fmt.Errorf("repeat %d: out of range", n)
			}
			parts := make([]string, n)
			for i := range parts {
				parts[i] = s
			}
			return strings.Join(parts, sep), nil
		},
		"base64": func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	}
	tmpl, err := template.New(filepath.Base(file)).Funcs(funcs).Option("missingkey=error").Parse(string(b))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, nil); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// WriteTree writes fsys (as ReadArchive returns it) under dir, which must
// exist: regular files with their mode's permission bits, directories,
// symbolic links and named pipes, so that an input can be a path whose
// file-system type or size is what is wrong with it.
func WriteTree(dir string, fsys fstest.MapFS) error {
	names := make([]string, 0, len(fsys))
	for n := range fsys {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		f := fsys[n]
		if !fs.ValidPath(n) {
			return fmt.Errorf("%q: not a valid path", n)
		}
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch f.Mode.Type() {
		case 0:
			if err := os.WriteFile(p, f.Data, f.Mode.Perm()); err != nil {
				return err
			}
		case fs.ModeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case fs.ModeSymlink:
			if err := os.Symlink(string(f.Data), p); err != nil {
				return err
			}
		case fs.ModeNamedPipe:
			if err := mkfifo(p); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		default:
			return fmt.Errorf("%s: cannot write a file of mode %s", n, f.Mode)
		}
	}
	return nil
}
