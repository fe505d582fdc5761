package corpus

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"testing/fstest"
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

// ReadInput reads one input file. A file named X.repeat stands for the
// input X: its first line is a byte count N, and the input is the rest of
// the file repeated, then cut, to exactly N bytes (a size bound's input
// without checking in megabytes). It returns the input's name (X) too.
func ReadInput(file string) (name string, data []byte, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
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
