package audit

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
)

// checkIndex: every run has an index entry pointing at its directory, and
// every index entry points at a run directory.
func (a *auditor) checkIndex(runs map[string]*runAudit) {
	// Runs in the order their first document landed (then by directory),
	// so that of two directories with one run ID the later is the
	// finding and names the earlier, whatever the map's order.
	var ordered []*runAudit
	for _, r := range runs {
		if r.admitted || r.fired {
			ordered = append(ordered, r)
		}
	}
	slices.SortFunc(ordered, func(x, y *runAudit) int {
		return cmp.Or(cmp.Compare(firstLanded(x), firstLanded(y)), cmp.Compare(x.dir, y.dir))
	})
	byRun := map[string]*runAudit{}
	for _, r := range ordered {
		key := r.cluster + "/" + r.id
		if o := byRun[key]; o != nil {
			a.add(Finding{Rule: RuleIndex, Cluster: r.cluster, Run: r.id, Path: r.dir, Message: fmt.Sprintf("run ID used twice in cluster %s: also %s", r.cluster, o.dir)})
			continue
		}
		byRun[key] = r
	}
	var paths []string
	for p, f := range a.files {
		if strings.HasPrefix(p, "ids/") && f.data != nil {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	pointed := map[string]bool{}
	for _, p := range paths {
		rp, ok := evidence.ParsePath(p)
		f := a.files[p]
		if f.ref {
			// Checked by the checkpoint's audit: it only points.
			pointed[strings.TrimSuffix(string(f.data), "\n")] = true
			continue
		}
		fail := func(msg string) {
			a.add(Finding{Rule: RuleIndex, Run: rp.Run, Path: p, Commit: f.commit.hash.String(), Message: msg})
		}
		if !ok || rp.Kind != evidence.KindIndex {
			fail("not ids/<cluster>/<xx>/<run>")
			continue
		}
		cluster, run := rp.Cluster, rp.Run
		if rp.Shard != evidence.Shard(run) {
			fail(fmt.Sprintf("shard %s, but run %s belongs in shard %s", rp.Shard, run, evidence.Shard(run)))
		}
		dir := strings.TrimSuffix(string(f.data), "\n")
		r := runs[dir]
		switch {
		case string(f.data) != dir+"\n" || strings.ContainsAny(dir, "\n\r"):
			fail("content is not one run directory and a newline")
		case r == nil || !r.admitted && !r.fired:
			fail(fmt.Sprintf("points at %s, which is not an admitted or fired run directory", dir))
		case r.cluster != cluster || r.id != run:
			fail(fmt.Sprintf("points at %s, the directory of run %s of cluster %s", dir, r.id, r.cluster))
		default:
			pointed[dir] = true
			if first := r.firstFile(); first != nil && f.landed.index > first.landed.index {
				fail("index entry landed after the run's admission (or firing)")
			}
		}
	}
	for _, r := range runs {
		if !r.ref && (r.admitted || r.fired) && !pointed[r.dir] {
			a.add(Finding{Rule: RuleIndex, Cluster: r.cluster, Run: r.id, Path: evidence.IndexPath(r.cluster, r.id), Message: fmt.Sprintf("no index entry points at %s", r.dir)})
		}
	}
}

// copyDoc is a signed document checkCopies compares: dir is its whole
// path when rel is empty.
type copyDoc struct {
	dir, rel string
	blob     plumbing.Hash
	landed   int
	commit   *commitInfo
}

func (d copyDoc) path() string {
	if d.rel == "" {
		return d.dir
	}
	return d.dir + "/" + d.rel
}

// checkCopies: no signed document of one run is byte for byte a document
// of another run. The documents of compacted runs are their closedFile
// records; only blobs that occur more than once are sorted and compared.
// An audit from a checkpoint compares its documents with those of the
// finished runs before the tip with the same bytes (refDocs).
func (a *auditor) checkCopies() {
	count := map[plumbing.Hash]int{}
	for _, f := range a.files {
		if f.doc != nil && f.doc.kind == kindDocument && !f.ref {
			count[f.blob]++
		}
	}
	a.scanClosed(func(_ *runAudit, c *closedFile) {
		if c.kind == kindDocument {
			count[c.blob]++
		}
	})
	var docs []copyDoc
	if a.tab != nil {
		blobs := make(map[plumbing.Hash]bool, len(count))
		for b := range count {
			blobs[b] = true
		}
		refs, err := a.refDocs(blobs)
		if err != nil {
			a.failIO(err)
			return
		}
		for _, d := range refs {
			count[d.blob]++
		}
		docs = refs
	}
	dup := false
	for _, n := range count {
		if n > 1 {
			dup = true
			break
		}
	}
	if !dup {
		return
	}
	docs = slices.DeleteFunc(docs, func(d copyDoc) bool { return count[d.blob] < 2 })
	for p, f := range a.files {
		if f.doc != nil && f.doc.kind == kindDocument && !f.ref && count[f.blob] > 1 {
			docs = append(docs, copyDoc{dir: p, blob: f.blob, landed: f.landed.index, commit: f.commit})
		}
	}
	a.scanClosed(func(r *runAudit, c *closedFile) {
		if c.kind == kindDocument && count[c.blob] > 1 {
			docs = append(docs, copyDoc{dir: r.dir, rel: c.rel, blob: c.blob, landed: int(c.landed), commit: a.commitAt(c.commit)})
		}
	})
	// Oldest first, so the copy is the one reported.
	sort.Slice(docs, func(i, j int) bool {
		if docs[i].landed != docs[j].landed {
			return docs[i].landed < docs[j].landed
		}
		return docs[i].path() < docs[j].path()
	})
	first := map[plumbing.Hash]string{}
	for _, d := range docs {
		p := d.path()
		if o, ok := first[d.blob]; ok && runDirOf(o) != runDirOf(p) {
			a.add(Finding{Rule: RuleCopiedDocument, Run: runOfPath(p), Path: p, Commit: d.commit.hash.String(),
				Message: fmt.Sprintf("byte for byte the document %s of another run", o)})
			continue
		}
		first[d.blob] = p
	}
}

func runDirOf(p string) string {
	if rp, ok := evidence.ParsePath(p); ok && rp.InRun() {
		return rp.Dir()
	}
	return p
}

// firstLanded is the first-parent index of the commit where r's first
// document (firing or admission) landed; runs without one sort last.
func firstLanded(r *runAudit) int {
	if f := r.firstFile(); f != nil && f.landed != nil {
		return f.landed.index
	}
	return math.MaxInt
}

// firstFile is the run's first document: its firing record, or its
// admission when it has none.
func (r *runAudit) firstFile() *fileRec {
	if r.firFile != nil {
		return r.firFile
	}
	return r.admFile
}
