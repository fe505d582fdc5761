package audit

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"signet.dev/signet/evidence"
)

// RunIDs lists the run IDs the branch's ids/ index names, of cluster or
// of every cluster when cluster is empty, sorted and without duplicates.
// Nothing is verified: it is for shell completion, never for a decision
// (Verify and Branch verify what they read).
func RunIDs(ctx context.Context, repo string, auth evidence.Auth, branch, cluster string) ([]string, error) {
	if branch == "" {
		branch = evidence.DefaultBranch
	}
	rd, err := openBranch(ctx, repo, auth, branch)
	if err != nil {
		return nil, err
	}
	defer rd.close()
	root, err := rootTree(rd)
	if err != nil {
		return nil, err
	}
	ids, err := lookupTree(rd, root, "ids")
	if err != nil || ids.IsZero() {
		return nil, err
	}
	clusters, err := subdirs(rd, ids)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range clusters {
		if cluster != "" && c.Name != cluster {
			continue
		}
		shards, err := subdirs(rd, c.Hash)
		if err != nil {
			return nil, err
		}
		for _, s := range shards {
			entries, err := readTree(rd, s.Hash)
			if err != nil {
				return nil, fmt.Errorf("evidence: could not read ids/%s/%s: %w", c.Name, s.Name, err)
			}
			for _, e := range entries {
				if e.Mode != filemode.Dir {
					out = append(out, e.Name)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

type dirEntry struct {
	Name string
	Hash plumbing.Hash
}

// subdirs lists the directories of tree h.
func subdirs(rd *openedBranch, h plumbing.Hash) ([]dirEntry, error) {
	entries, err := readTree(rd, h)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not read tree %s: %w", h, err)
	}
	var out []dirEntry
	for _, e := range entries {
		if e.Mode == filemode.Dir {
			out = append(out, dirEntry{e.Name, e.Hash})
		}
	}
	return out, nil
}
