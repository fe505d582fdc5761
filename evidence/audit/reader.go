package audit

import (
	"fmt"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/signing"
)

// BranchReader is all the audit reads of a repository: the tip of one
// branch, and objects by hash (gitobj.Source, which bounds what it
// returns). First-parent history, trees and files the audit derives from
// those objects itself; nothing is ever written through it.
type BranchReader interface {
	gitobj.Source
	// Tip is the branch's tip commit.
	Tip() plumbing.Hash
	// Resolve returns the commit that rev (a hash or a revision) names in
	// the repository, false when it names none.
	Resolve(rev string) (plumbing.Hash, bool)
	// Has reports whether the repository holds object h, reachable from
	// the branch or not.
	Has(h plumbing.Hash) bool
}

// readRaw returns the content of object h of type t, refusing one
// larger than an evidence file may be.
func readRaw(src gitobj.Source, t plumbing.ObjectType, h plumbing.Hash) ([]byte, error) {
	b, err := src.Object(t, h, signing.MaxEnvelopeSize*2)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not read %s %s: %w", t, h, err)
	}
	return b, nil
}

// readTree returns the entries of tree h.
func readTree(src gitobj.Source, h plumbing.Hash) ([]object.TreeEntry, error) {
	b, err := src.Object(plumbing.TreeObject, h, 0)
	if err != nil {
		return nil, err
	}
	return gitobj.ParseTree(b)
}

// lookupTree returns the hash of the directory p under root, zero when
// there is none (or p is a file).
func lookupTree(src gitobj.Source, root plumbing.Hash, p string) (plumbing.Hash, error) {
	e, err := lookupEntry(src, root, p)
	if err != nil || e == nil || e.Mode != filemode.Dir {
		return plumbing.ZeroHash, err
	}
	return e.Hash, nil
}

// lookupEntry returns the entry at p under root, nil when there is none.
func lookupEntry(src gitobj.Source, root plumbing.Hash, p string) (*object.TreeEntry, error) {
	cur := object.TreeEntry{Mode: filemode.Dir, Hash: root}
	for _, name := range strings.Split(p, "/") {
		if cur.Mode != filemode.Dir {
			return nil, nil
		}
		entries, err := readTree(src, cur.Hash)
		if err != nil {
			return nil, fmt.Errorf("evidence: could not read tree %s: %w", cur.Hash, err)
		}
		found := false
		for _, e := range entries {
			if e.Name == name {
				cur, found = e, true
				break
			}
		}
		if !found {
			return nil, nil
		}
	}
	return &cur, nil
}

// rootTree returns the tip's root tree.
func rootTree(rd BranchReader) (plumbing.Hash, error) {
	raw, err := rd.Object(plumbing.CommitObject, rd.Tip(), signing.MaxEnvelopeSize*2)
	if err == nil {
		var c gitobj.CommitHeader
		if c, err = gitobj.ParseCommitHeader(raw); err == nil {
			return c.Tree, nil
		}
	}
	return plumbing.ZeroHash, fmt.Errorf("evidence: could not read tip %s: %w", rd.Tip(), err)
}

type treeFile struct {
	path string
	hash plumbing.Hash
}

// walkFiles lists the files under dir of root (none when absent).
func walkFiles(rd BranchReader, root plumbing.Hash, dir string) ([]treeFile, error) {
	h, err := lookupTree(rd, root, dir)
	if err != nil || h.IsZero() {
		return nil, err
	}
	entries, err := readTree(rd, h)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not read %s: %w", dir, err)
	}
	var out []treeFile
	for _, e := range entries {
		p := path.Join(dir, e.Name)
		if e.Mode == filemode.Dir {
			sub, err := walkFiles(rd, root, p)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		}
		out = append(out, treeFile{p, e.Hash})
	}
	return out, nil
}
