package audit

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// sigResult is the outcome of a commit signature check.
type sigResult struct {
	raw []byte
	key string
	err error
}

// docRec is a verified (or refused) signed document.
type docRec struct {
	kind      int
	statement *signing.Statement
	keys      []string
	rule      string // RuleSignature or RuleUntrustedSigner when refused
	err       error
	approval  *signing.Approval
}

// verifyPool verifies signatures on a fixed number of goroutines. When
// the branch's object source is safe for concurrent use (reads is true)
// each worker reads the blobs of its documents itself; otherwise the
// walker reads them.
type verifyPool struct {
	policy  *signing.TrustPolicy
	signers signing.Signers
	objs    gitobj.Source
	jobs    chan func()
	reads   bool
	wg      sync.WaitGroup
	workers sync.WaitGroup

	mu        sync.Mutex
	approvals map[plumbing.Hash]*approvalResult // identical approval copies are parsed and checked once
	errMu     sync.Mutex
	err       error // the first read error of a worker
	// revokedAfter is, per evidence key the trust policy revokes after a
	// commit, that commit's index in the history (-1: before every commit
	// read). Set before the replay, read-only after.
	revokedAfter map[string]int
}

type approvalResult struct {
	once sync.Once
	ap   *signing.Approval
	err  error
}

func newVerifyPool(rd BranchReader, p *signing.TrustPolicy, n int) *verifyPool {
	vp := &verifyPool{policy: p, signers: p.Signers(signing.RoleEvidenceSigner), objs: rd, reads: rd.Concurrent(),
		jobs: make(chan func(), 1024), approvals: map[plumbing.Hash]*approvalResult{}, revokedAfter: map[string]int{}}
	for range n {
		vp.workers.Go(func() {
			for j := range vp.jobs {
				j()
				vp.wg.Done()
			}
		})
	}
	return vp
}

func (vp *verifyPool) submit(f func()) {
	vp.wg.Add(1)
	vp.jobs <- f
}

// wait runs queued jobs on the calling goroutine too until none is left,
// waits for every job submitted so far, and returns the first error a
// worker had reading an object.
func (vp *verifyPool) wait() error {
	for drained := false; !drained; {
		select {
		case j := <-vp.jobs:
			j()
			vp.wg.Done()
		default:
			drained = true
		}
	}
	vp.wg.Wait()
	vp.errMu.Lock()
	defer vp.errMu.Unlock()
	return vp.err
}

func (vp *verifyPool) close() {
	close(vp.jobs)
	vp.workers.Wait()
}

func (vp *verifyPool) submitCommit(c *commitInfo) {
	vp.submit(func() {
		c.sigErr.key, c.sigErr.err = signing.VerifyCommit(c.sigErr.raw, vp.signers, c.when)
		c.sigErr.raw = nil
	})
}

// submitDoc verifies f; data is nil when the worker reads the blob.
func (vp *verifyPool) submitDoc(f *fileRec, data []byte) {
	vp.submit(func() {
		if data == nil {
			var err error
			if data, err = readRaw(vp.objs, plumbing.BlobObject, f.blob); err != nil {
				vp.errMu.Lock()
				if vp.err == nil {
					vp.err = fmt.Errorf("evidence: %s: %w", f.path, err)
				}
				vp.errMu.Unlock()
				return
			}
			f.digest = specs.DigestOf(data)
		}
		if f.doc.kind == kindApproval {
			vp.mu.Lock()
			r := vp.approvals[f.blob]
			if r == nil {
				r = &approvalResult{}
				vp.approvals[f.blob] = r
			}
			vp.mu.Unlock()
			r.once.Do(func() {
				r.ap, r.err = signing.ParseApproval(f.path, data)
				if r.err == nil {
					// Verify here, on the pool, once per distinct
					// approval; Decide uses the result and reports
					// the signatures that did not verify.
					_, _ = r.ap.Verify(vp.policy)
				}
			})
			if r.err != nil {
				f.doc.rule, f.doc.err = RuleApproval, r.err
				return
			}
			f.doc.approval = r.ap
			f.doc.statement = r.ap.Statement
			return
		}
		v, err := signing.VerifyDSSE(data, vp.signers, f.commit.when)
		if err != nil {
			f.doc.rule, f.doc.err = refusalRule(err), refusalMessage(err)
			return
		}
		keys, why := v.Keys, []string(nil)
		if len(vp.revokedAfter) > 0 {
			keys = nil
			for _, k := range v.Keys {
				if r := vp.revokedAfterAnchor(k, f.commit); r != "" {
					why = append(why, r)
					continue
				}
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			f.doc.rule, f.doc.err = RuleUntrustedSigner, errors.New(strings.Join(why, "; "))
			return
		}
		f.doc.statement, f.doc.keys = v.Statement, keys
	})
}

// refusalRule returns the rule a document that did not verify falls
// under: RuleUntrustedSigner when a key that may not sign evidence made it,
// or one that was not valid when committed; RuleSignature when it does not
// parse or its signature does not verify (forged or corrupted).
func refusalRule(err error) string {
	var ve *signing.VerifyError
	if errors.As(err, &ve) {
		switch ve.Kind {
		case signing.KindUnknownKey, signing.KindNotAllowed, signing.KindKeyNotValid:
			return RuleUntrustedSigner
		}
	}
	return RuleSignature
}

// refusalMessage returns what a finding states for a refused document or
// commit: the verifier's cause, without its "verification failed" framing.
func refusalMessage(err error) error {
	var ve *signing.VerifyError
	if errors.As(err, &ve) {
		return ve.Err
	}
	return err
}
