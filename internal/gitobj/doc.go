// Package gitobj is signet's Git object engine: it reads and writes the
// objects of a Git repository directly, for the evidence store and the
// auditor, where go-git's general machinery cost more than the rest of an
// append or an audit.
//
// It reads objects (Dir: pack files and their version 2 indexes mapped
// into memory, loose objects, delta chains; StorerSource through go-git),
// parses trees (ParseTree) and commit headers (ParseCommitHeader), builds
// a signed commit by splicing only the trees on the paths to new files
// (Builder), writes packs of whole objects with their index (AddPack) and
// merges small packs geometrically (Consolidate), indexes a fetched pack
// in bounded memory (PackIndexer), and fetches from and pushes to a
// remote over the smart protocol (Remote).
//
// Every byte it reads from a repository or a remote is untrusted. What it
// refuses to do:
//   - return an object whose content does not hash to its name, one of
//     another type than asked (plumbing.ErrObjectNotFound), or one larger
//     than the caller's limit; a declared size is checked before it is
//     allocated, and a delta chain is bounded;
//   - read a malformed tree, commit header or pack index as anything but
//     an error (never a shorter or partial result);
//   - replace: a Builder change to a path its base tree holds fails with
//     ErrExists; every other entry keeps its hash, byte for byte;
//   - force: a push is a compare-and-swap from the old value in the
//     receive-pack update command, or, written in process to a local
//     repository no hook watches, under the ref's git lock file (a
//     *MovedError when the ref moved; ErrUnreachable, try again, while
//     another writer holds the lock);
//   - send what the remote has: a push carries exactly the objects a
//     Builder created (go-git's Remote.Push walks everything reachable
//     from the remote's refs, go-git issue #1102, so Remote speaks
//     receive-pack itself); a fetch asks for a self-contained pack, and a
//     pack that is not (or whose checksum, objects or count are wrong) is
//     installed not at all;
//   - lose objects: a consolidation writes and syncs the merged pack
//     before it removes the packs it replaces;
//   - show credentials: URLs lose their userinfo and secrets are scrubbed
//     from every error; Auth prints redacted.
//
// It knows nothing of evidence paths, layouts or documents, and signs
// nothing itself: a Builder is given a SignFunc.
//
// Errors: ErrExists; a *RemoteError that unwraps to ErrUnreachable (retry
// later), ErrAuth (fix the credentials) or ErrRejected; a *MovedError.
package gitobj
