package audit

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// checkChains audits every cluster's receipt chain: links 1..N without a
// gap, one receipt per sequence number, each linking the one before.
func (a *auditor) checkChains() {
	type link struct {
		seq  int64
		path string
		f    *fileRec
		l    evidence.ChainLink
	}
	links := map[string]map[int64]*link{}
	for p, f := range a.files {
		if !strings.HasPrefix(p, "chain/") || f.data == nil && f.link == nil {
			continue
		}
		fail := func(msg string) {
			a.add(Finding{Rule: RuleReceiptChain, Path: p, Commit: f.commit.hash.String(), Message: msg})
		}
		rp, ok := evidence.ParsePath(p)
		if !ok || rp.Kind != evidence.KindChainLink {
			fail("not chain/<cluster>/<sequence/10000 in 8 digits>/<12-digit sequence>")
			continue
		}
		seq := rp.Seq
		if seq < 1 {
			fail(fmt.Sprintf("sequence %d: sequences start at 1", seq))
			continue
		}
		var l evidence.ChainLink
		if f.link != nil {
			l = *f.link
		} else if err := signing.StrictUnmarshal(f.data, &l); err != nil {
			fail("link does not decode: " + err.Error())
			continue
		}
		if links[rp.Cluster] == nil {
			links[rp.Cluster] = map[int64]*link{}
		}
		links[rp.Cluster][seq] = &link{seq: seq, path: p, f: f, l: l}
	}
	receipts := map[string][]*runAudit{}
	for _, r := range a.runs {
		if r.chainLink() != nil {
			receipts[r.cluster] = append(receipts[r.cluster], r)
		}
	}
	clusters := map[string]bool{}
	for c := range links {
		clusters[c] = true
	}
	for c := range receipts {
		clusters[c] = true
	}
	var names []string
	for c := range clusters {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		ls := links[c]
		var seqs []int64
		for s := range ls {
			seqs = append(seqs, s)
		}
		slices.Sort(seqs)
		var max int64
		if len(seqs) > 0 {
			max = seqs[len(seqs)-1]
		}
		// Links up to the head at a checkpoint's tip are there: that
		// audit found no gap, and a deleted link is a full audit's.
		for s := a.heads[c] + 1; s <= max; s++ {
			if ls[s] == nil {
				a.add(Finding{Rule: RuleReceiptChain, Cluster: c, Path: evidence.ChainPath(c, s), Message: fmt.Sprintf("gap: no link for sequence %d of cluster %s (the chain runs to %d)", s, c, max)})
			}
		}
		linked := map[string]int64{} // receipt path → sequence
		for _, s := range seqs {
			l := ls[s]
			if l.f.ref {
				linked[l.l.Receipt.Path] = s
				continue
			}
			fail := func(msg string) {
				a.add(Finding{Rule: RuleReceiptChain, Cluster: c, Run: l.l.Run, Path: l.path, Commit: l.f.commit.hash.String(), Message: msg})
			}
			rf := a.fileOrNil(l.l.Receipt.Path)
			switch {
			case !isReceiptOf(l.l.Receipt.Path, c, l.l.Run):
				fail(fmt.Sprintf("links %s, not the receipt of run %s of cluster %s", l.l.Receipt.Path, l.l.Run, c))
				continue
			case rf == nil:
				fail(fmt.Sprintf("links %s, which is not on the branch", l.l.Receipt.Path))
				continue
			case rf.digest != l.l.Receipt.Digest:
				fail(fmt.Sprintf("links %s by %s, but its digest is %s", l.l.Receipt.Path, l.l.Receipt.Digest, rf.digest))
			}
			if prev := ls[s-1]; prev != nil && l.f.landed.index < prev.f.landed.index {
				fail(fmt.Sprintf("link %d landed before link %d", s, s-1))
			}
			linked[l.l.Receipt.Path] = s
		}
		bySeq := map[int64][]*runAudit{}
		byPrev := map[string][]*runAudit{}
		for _, r := range receipts[c] {
			rc := r.chainLink()
			rp := path.Join(r.dir, evidence.ReceiptFile)
			fail := func(msg string) {
				a.add(Finding{Rule: RuleReceiptChain, Cluster: c, Run: r.id, Path: rp, Commit: r.rcFile.commit.hash.String(), Message: msg})
			}
			bySeq[rc.Sequence] = append(bySeq[rc.Sequence], r)
			if r.ref {
				// Checked by the checkpoint's audit: only what this
				// audit's links and receipts can change, a later link
				// naming it or a fork with one of its receipts. Its own
				// link may not be restored (it is there: the checkpoint's
				// audit found it), a later one naming it is.
				if s, ok := linked[rp]; ok && s != rc.Sequence {
					fail(fmt.Sprintf("linked as sequence %d, but the receipt claims sequence %d", s, rc.Sequence))
				}
				if rc.Sequence > 1 && rc.Previous != nil {
					byPrev[string(rc.Previous.Digest)] = append(byPrev[string(rc.Previous.Digest)], r)
				}
				continue
			}
			if s, ok := linked[rp]; !ok {
				fail(fmt.Sprintf("receipt with sequence %d is not linked into the chain of cluster %s", rc.Sequence, c))
			} else if s != rc.Sequence {
				fail(fmt.Sprintf("linked as sequence %d, but the receipt claims sequence %d", s, rc.Sequence))
			}
			switch {
			case rc.Sequence < 1:
				fail(fmt.Sprintf("sequence %d: sequences start at 1", rc.Sequence))
			case rc.Sequence == 1 && rc.Previous != nil:
				fail("the first receipt of the chain names a previous receipt")
			case rc.Sequence > 1 && rc.Previous == nil:
				fail(fmt.Sprintf("sequence %d without the previous receipt's digest", rc.Sequence))
			case rc.Sequence > 1:
				byPrev[string(rc.Previous.Digest)] = append(byPrev[string(rc.Previous.Digest)], r)
				prev := ls[rc.Sequence-1]
				if prev == nil {
					fail(fmt.Sprintf("previous receipt (sequence %d) is not linked", rc.Sequence-1))
					break
				}
				pf := a.fileOrNil(prev.l.Receipt.Path)
				if rc.Previous.Path != prev.l.Receipt.Path || pf == nil || pf.digest != rc.Previous.Digest {
					fail(fmt.Sprintf("previous is %s %s, but sequence %d is %s", rc.Previous.Path, rc.Previous.Digest, rc.Sequence-1, prev.l.Receipt.Path))
				} else if r.rcFile.landed.index < pf.landed.index {
					fail(fmt.Sprintf("landed before the previous receipt %s", prev.l.Receipt.Path))
				}
			}
		}
		for _, group := range []map[string][]*runAudit{byPrev, seqGroups(bySeq)} {
			var keys []string
			for k := range group {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				rs := group[k]
				if len(rs) < 2 {
					continue
				}
				var ids []string
				for _, r := range rs {
					ids = append(ids, r.id)
				}
				sort.Strings(ids)
				for _, r := range rs {
					a.add(Finding{Rule: RuleReceiptChain, Cluster: c, Run: r.id, Path: path.Join(r.dir, evidence.ReceiptFile), Commit: r.rcFile.commit.hash.String(),
						Message: fmt.Sprintf("fork: receipts of runs %s claim the same %s", strings.Join(ids, ", "), k)})
				}
			}
		}
	}
}

// isReceiptOf reports whether p is the receipt of run of cluster.
func isReceiptOf(p, cluster, run string) bool {
	rp, ok := evidence.ParsePath(p)
	return ok && rp.Kind == evidence.KindReceipt && rp.Cluster == cluster && rp.Run == run
}

func seqGroups(m map[int64][]*runAudit) map[string][]*runAudit {
	out := map[string][]*runAudit{}
	for s, rs := range m {
		out[fmt.Sprintf("sequence %d", s)] = rs
	}
	return out
}

// verifyChainLinks checks a receipt's own link and its link to the
// previous receipt, reading only those files at the tip.
func (a *auditor) verifyChainLinks(r *runAudit, root plumbing.Hash) {
	rc := r.receipt
	rp := path.Join(r.dir, evidence.ReceiptFile)
	fail := func(p, msg string) {
		a.add(Finding{Rule: RuleReceiptChain, Cluster: r.cluster, Run: r.id, Path: p, Message: msg})
	}
	readLink := func(seq int64) (*evidence.ChainLink, string) {
		p := evidence.ChainPath(r.cluster, seq)
		e, err := lookupEntry(a.rd, root, p)
		if err != nil || e == nil {
			fail(p, fmt.Sprintf("no link for sequence %d of cluster %s", seq, r.cluster))
			return nil, p
		}
		b, err := readRaw(a.rd, plumbing.BlobObject, e.Hash)
		if err != nil {
			fail(p, err.Error())
			return nil, p
		}
		var l evidence.ChainLink
		if err := signing.StrictUnmarshal(b, &l); err != nil {
			fail(p, "link does not decode: "+err.Error())
			return nil, p
		}
		return &l, p
	}
	if rc.Sequence < 1 {
		fail(rp, fmt.Sprintf("sequence %d: sequences start at 1", rc.Sequence))
		return
	}
	if l, p := readLink(rc.Sequence); l != nil && (l.Run != r.id || l.Receipt.Path != rp || l.Receipt.Digest != r.rcFile.digest) {
		fail(p, fmt.Sprintf("sequence %d links run %s %s %s, not this receipt (%s): a fork or a replaced receipt", rc.Sequence, l.Run, l.Receipt.Path, l.Receipt.Digest, r.rcFile.digest))
	}
	switch {
	case rc.Sequence == 1 && rc.Previous != nil:
		fail(rp, "the first receipt of the chain names a previous receipt")
	case rc.Sequence > 1 && rc.Previous == nil:
		fail(rp, fmt.Sprintf("sequence %d without the previous receipt's digest", rc.Sequence))
	case rc.Sequence > 1:
		l, _ := readLink(rc.Sequence - 1)
		if l == nil {
			return
		}
		e, err := lookupEntry(a.rd, root, l.Receipt.Path)
		var d string
		if err == nil && e != nil {
			if b, err := readRaw(a.rd, plumbing.BlobObject, e.Hash); err == nil {
				d = string(specs.DigestOf(b))
			}
		}
		if rc.Previous.Path != l.Receipt.Path || string(rc.Previous.Digest) != d || l.Receipt.Digest != rc.Previous.Digest {
			fail(rp, fmt.Sprintf("previous is %s %s, but sequence %d is %s (%s)", rc.Previous.Path, rc.Previous.Digest, rc.Sequence-1, l.Receipt.Path, d))
		}
	}
}
