package gitobj

import (
	"bytes"
	"slices"
	"strconv"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/stretchr/testify/assert"
)

// TestParseMode: tree modes parse as strconv.ParseUint(s, 8, 32) would
// (no sign, no underscore, no digit 8 or 9, nothing past 32 bits).
func TestParseMode(t *testing.T) {
	for _, s := range []string{"100644", "40000", "040000", "160000", "120000", "100755", "0", "7", "",
		"8", "9", "-1", "+1", "1_0", " 1", "1 ", "37777777777", "40000000000", "00000000000000000001", "777777777777"} {
		want, err := strconv.ParseUint(s, 8, 32)
		got, ok := parseMode([]byte(s))
		if err != nil {
			assert.False(t, ok, "%q parsed as %o", s, got)
			continue
		}
		if len(s) > 11 {
			assert.False(t, ok, "%q: longer than any mode", s)
			continue
		}
		assert.True(t, ok, "%q refused", s)
		assert.Equal(t, uint32(want), got, "%q", s)
	}
}

// FuzzRawEntries: the tree reader the audit and the store use on objects
// read from any repository either refuses a tree or reads entries that
// are, end to end, exactly its bytes, each "<octal mode> <name>\0<hash>"
// with a mode strconv reads the same, a non-empty name without NUL.
func FuzzRawEntries(f *testing.F) {
	var tree []byte
	for _, e := range []treeEntry{{name: "a", mode: filemode.Regular}, {name: "d", mode: filemode.Dir}, {name: "x.json", mode: filemode.Executable}} {
		tree = e.append(tree)
	}
	f.Add(tree)
	f.Add([]byte("040000 d\x00aaaaaaaaaaaaaaaaaaaa"))
	f.Add([]byte("100644 \x00aaaaaaaaaaaaaaaaaaaa"))
	f.Add([]byte("+1 a\x00aaaaaaaaaaaaaaaaaaaa"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var whole []byte
		for e, err := range rawEntries(data) {
			if err != nil {
				return
			}
			whole = append(whole, e.raw...)
			sp := bytes.IndexByte(e.raw, ' ')
			mode, perr := strconv.ParseUint(string(e.raw[:sp]), 8, 32)
			if perr != nil || uint32(mode) != uint32(e.mode) {
				t.Fatalf("mode %q read as %o (strconv: %o, %v)", e.raw[:sp], e.mode, mode, perr)
			}
			if len(e.name) == 0 || bytes.IndexByte(e.name, 0) >= 0 {
				t.Fatalf("name %q", e.name)
			}
			if !bytes.Equal(e.raw, slices.Concat(e.raw[:sp+1], e.name, []byte{0}, e.hash[:])) {
				t.Fatalf("entry %q is not mode, name and hash", e.raw)
			}
		}
		if !bytes.Equal(whole, data) {
			t.Fatalf("entries cover %d of %d bytes", len(whole), len(data))
		}
	})
}
