// Package local is signet's embedded backend for one machine (DESIGN §7): it
// runs one check as a child process of signet, in its own process group and
// a fresh temporary directory, and reports how it ended and what result it
// left, for specs.Evaluate to judge. It also takes the machine's identity
// snapshot for the evidence.
//
// The backend refuses to:
//   - start a check without a wall-clock deadline, or with environment
//     variables other than DESIGN §4's (it adds PATH, HOME and
//     SIGNET_RESULT_FILE itself and passes nothing of signet's own
//     environment);
//   - run a check as uid 0 through Request.User: a User is an unprivileged
//     account, and when signet runs as root the caller must give one so that
//     the check cannot read signet's keys, tokens or state;
//   - let a check outlive its deadline, its cancel or its own exit: the
//     whole process group gets SIGTERM, the grace period, then SIGKILL, and
//     no process of the group is left alive when Run returns;
//   - read as the result anything but a regular file with one link, owned
//     by the check's user, named directly (no symlink) in the check's own
//     directory, or more than specs.MaxResultBytes+1 bytes of it: signet
//     never reads a file on a check's behalf;
//   - keep more than the last MaxLogBytes of stdout and of stderr, or wait
//     unboundedly for a pipe that a stray process holds open.
//
// It does not contain processes that leave the group on purpose (setsid,
// setpgid) or that the kernel cannot kill (uninterruptible sleep), nor files
// the check writes outside its directory (/tmp, /dev/shm); it does not limit
// CPU, memory or devices (no cgroups); and it does not verify the script's
// digest: the caller passes bytes it has verified. If signet itself dies,
// the kernel kills the check's main process (PR_SET_PDEATHSIG) but not the
// rest of its group: Sweep, at the next start, kills what is left and removes
// the directories, and recovery records such a check as interrupted. A User
// shared with other software (nobody) can signal or trace that software's
// processes: give the backend an account of its own. Linux only.
//
// It registers itself as the "local" backend family (family.go): this
// machine as a one-node Fleet, reserved only by the reconciler's in-process
// holds, and Backend (backend.go), the reconciler's adapter of Run.
package local
