package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// The exit statuses of every signet command: one table, no code meaning
// two things (`signet help exit-codes`, README). signet exec, which runs
// inside a check's pod, passes its script's own status through instead.
const (
	exitOK              = 0  // done: valid, clean, approved, verified, written, Pass
	exitFindings        = 1  // the input breaks a rule: findings (validate, render, diff, audit, verify, sign, digest)
	exitUsage           = 2  // usage or I/O error: nothing was decided (bad flags, unreadable file, repository or branch, daemon; a failed daemon pass)
	exitNotApproved     = 3  // something is not approved (approvals, diff, run)
	exitUnsigned        = 4  // diff --require-signed-commit: HEAD is not signed by a trusted key
	exitWaiting         = 5  // run: the request cannot start now (its nodes are busy, retained or not eligible)
	exitRunFail         = 10 // run: verdict Fail
	exitRunError        = 11 // run: verdict Error (or the run could not be followed to its end)
	exitRunInconclusive = 12 // run: verdict Inconclusive
	exitRunCanceled     = 13 // run: verdict Canceled
)

// exitCodesHelp is `signet help exit-codes` and README's table.
const exitCodesHelp = `Every signet command exits with one of these statuses; no status means two
different things across commands.

  0   done: valid, clean, approved, verified, written; signet run: Pass
  1   findings: the input breaks a rule (validate, render, diff, audit, verify,
      sign, digest); signet run: the request is invalid
  2   usage or I/O error: nothing was decided (bad flags, an unreadable file,
      repository or branch; signet get: the daemon cannot be read; signet
      reconcile --now --wait: the daemon's pass failed or did not end in time)
  3   not approved (approvals, diff; signet run: the request, its profile or
      an action is not approved)
  4   signet diff --require-signed-commit: HEAD is not signed by a trusted key
  5   signet run: the request cannot start now (nodes busy, retained or not
      eligible); run it again later
  10  signet run: verdict Fail
  11  signet run: verdict Error, or the run could not be followed to its end
      (it stays recoverable: run the same command again)
  12  signet run: verdict Inconclusive
  13  signet run: verdict Canceled

signet exec, which runs a check's script inside its pod, exits with the
script's own status (128+n when signal n ended it).`

func init() { addCommand(newExitCodesTopic) }

// newExitCodesTopic is a help topic: a command without Run, shown by
// `signet help exit-codes`.
func newExitCodesTopic() *cobra.Command {
	return &cobra.Command{
		Use:     "exit-codes",
		Short:   "The exit statuses of every signet command",
		Long:    strings.TrimSpace(exitCodesHelp),
		Example: "  signet help exit-codes",
	}
}
