// Package audit proves what an evidence branch says (DESIGN §6): that its
// history is append-only and first-parent linear with commits signed by
// evidence signers and committer times that never decrease, that every
// document is signed by a key allowed to sign evidence and valid at the
// later of its commit's time and the times it states (none later than
// its commit's) and not after its key's revocation anchor, that every
// digest binding
// holds, that each run's documents landed in lifecycle order and add up
// (the run evidence is exactly evidence.Summarize of its checks), that
// admissions, cancels and releases are backed by approvals meeting the
// trust policy's threshold, that every cluster's receipt chain has no gap
// or fork, that the run-ID index matches the run directories and (with a
// pinned commit) that the branch was not rewritten.
//
// Branch audits a whole branch, Verify one run (found through the ids/
// index, replaying only its directory's history) and Status lists what
// the tip says without proving it. The rules a finding names are the
// Rule constants in report.go; they, the finding messages and the report's
// JSON are stable.
//
// The audit reads the branch through a BranchReader (the tip and objects
// by hash), the evidence layout and documents through package evidence,
// and signatures through package signing. What it refuses to do:
//   - write: no worktree, no ref update, no object written; a remote is
//     fetched into a temporary bare repository removed afterwards;
//   - trust the writer: nothing of the reconciler is used, and a document
//     the writer would compute (the run summary) is recomputed with the
//     shared protocol and compared for equality;
//   - stop at the first problem: problems with the evidence are Findings
//     in the report; an error means the branch could not be read at all
//     (ErrNoBranch, ErrRunNotFound, ErrAmbiguousRun, an unreadable object,
//     a failed fetch);
//   - show credentials: a remote URL loses its password and secrets are
//     scrubbed from every error.
package audit
