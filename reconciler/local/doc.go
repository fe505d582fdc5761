// Package local is signet's embedded backend for one machine (DESIGN §7): it
// runs one check as a child process of signet, in its own process group and
// a fresh temporary directory, and reports how it ended and what result it
// left, for specs.Evaluate to judge. It also takes the machine's identity
// snapshot for the evidence.
//
// When signet runs as root, checks are isolated from signet and from each
// other: each runs as a transient uid of its own (UIDPool: no account has
// it, no other live check holds it, no check starts while a process of it
// is alive), in a cgroup of its own where the machine has a writable
// cgroup2 hierarchy (FindCgroupParent), under a work root that signet
// created and verifies before every check (EnsureWorkRoot), in a workspace
// built and entered through directory descriptors, with no descriptor of
// signet's above 2.
//
// The backend refuses to:
//   - start a check without a wall-clock deadline, or with environment
//     variables other than DESIGN §4's (it adds PATH, HOME and
//     SIGNET_RESULT_FILE itself and passes nothing of signet's own
//     environment);
//   - run a check as uid 0 through Request.User, or as a uid any live
//     process has;
//   - let a check outlive its deadline, its cancel or its own exit: the
//     whole process group gets SIGTERM, the grace period, then SIGKILL;
//     then everything left in its cgroup is killed (cgroup.kill) or,
//     without a cgroup, every process of its uid (setsid does not escape
//     either);
//   - read as the result anything but a regular file with one link, owned
//     by the check's user, named directly (no symlink) in the check's own
//     directory, or more than specs.MaxResultBytes+1 bytes of it: signet
//     never reads a file on a check's behalf;
//   - use a work root that is a symlink, is not signet's, lets others in
//     beyond search (mode 0711), or lies under a directory others may
//     write without the sticky bit;
//   - keep more than the last MaxLogBytes of stdout and of stderr, or wait
//     unboundedly for a pipe that a stray process holds open.
//
// It does not contain processes the kernel cannot kill (uninterruptible
// sleep), nor files the check writes outside its directory (/tmp,
// /dev/shm); it does not limit CPU, memory or devices; and it does not
// verify the script's digest: the caller passes bytes it has verified.
// When signet does not run as root, checks run as signet's own user,
// contained by their process group and, where signet may create one, a
// cgroup. If signet itself dies, the kernel kills the check's main process
// (PR_SET_PDEATHSIG) but not the rest: at the next start the family sweeps
// the work root (Sweep), the check cgroups and the pool's uids, and
// recovery records such a check as interrupted. Linux only.
//
// It registers itself as the "local" backend family (family.go): this
// machine as a one-node Fleet, reserved only by the reconciler's in-process
// holds, and Backend (backend.go), the reconciler's adapter of Run.
package local
