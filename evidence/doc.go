// Package evidence holds the durable record of signet's runs: the
// documents of a run and the Git evidence branch that stores them
// (DESIGN §5–§6). The auditor that proves a branch, and the catalog of
// rules its findings name, is package evidence/audit.
//
// The Store appends to the branch without a worktree, through signet's Git
// object engine (internal/gitobj, which says what it refuses of the bytes
// it reads). It keeps a bare mirror under StateDir and builds each commit
// straight from tree objects, rewriting only the trees on the paths from
// the root to the new files and reusing every other subtree by hash, so an
// append reads and writes a handful of trees whatever the branch holds.
// With the sharded layout (RunDir, IndexPath) the largest tree an append
// rewrites holds about 400 entries at 10^5 runs on one day.
//
// What the Store refuses to do:
//   - overwrite or delete: an append whose path already exists on the tip
//     fails with ErrExists and writes nothing; a lost race is reported, never
//     resolved by overwriting;
//   - force: a push is a compare-and-swap from the tip the commit was built
//     on (the old value in the receive-pack update command). On refusal it
//     fetches, rebuilds on the new tip and retries within
//     StoreOptions.Timeout;
//   - act on a rewritten branch: the last tip it pushed or verified is kept
//     in StateDir (written atomically) and, with a TipKeeper, where a lost
//     StateDir cannot take it along (compare-and-swap, never a blind
//     overwrite); a remote tip that does not descend from it, or from a
//     pinned tip, fails with ErrRolledBack until a person looks;
//   - trust a tip it cannot hold: with nothing remembered, kept or pinned,
//     an existing branch fails Open with ErrUnanchored unless the caller
//     accepts its current tip (a branch not yet created is first use);
//   - send what the remote has: a push carries exactly the objects the
//     append created (gitobj.Remote speaks receive-pack itself);
//   - show credentials: URLs lose their userinfo and secrets are scrubbed
//     from every error; Auth prints redacted.
//
// Every commit carries an SSH signature (sshsig, namespace "git", SHA-512)
// that stock `git verify-commit` accepts with gpg.format=ssh and an
// allowed-signers file.
//
// Errors: ErrExists (another writer won: abandon the step), ErrRolledBack
// and ErrUnanchored (a person must act), ErrTipConflict (the kept tip
// moved under the store: the next Refresh decides), ErrNotFound, ErrInvalidPath; a *RemoteError that
// unwraps to ErrUnreachable (retry later), ErrAuth (fix the credentials)
// or ErrRejected (the remote refused for a reason other than a race).
package evidence
