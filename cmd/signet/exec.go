package main

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/reconciler/kube"
)

func init() {
	addCommand(newExecCmd)
	addCommand(newInstallCmd)
}

// execOptions are the flags of signet exec.
type execOptions struct {
	Script         string
	Digest         string
	TerminationLog string
	WorkDir        string
}

// AddFlags registers the command's flags.
func (o *execOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Script, "script", "", "the check script to verify and run")
	fs.StringVar(&o.Digest, "digest", "", "the script's expected digest (sha256:…)")
	fs.StringVar(&o.TerminationLog, "termination-log", "/dev/termination-log", "file that receives the result (the container's terminationMessagePath)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "parent of the private working directory (default: the system's temporary directory)")
}

func newExecCmd() *cobra.Command {
	o := &execOptions{}
	cmd := &cobra.Command{
		Use:   "exec --script PATH --digest sha256:…",
		Short: "Run a check script inside a check pod (the pod backend's entrypoint)",
		Long: `Verify a check script against its digest and run it, as the entrypoint of a
check pod's container. A script whose digest does not match is not run.
The verified bytes are copied into a private directory and executed directly
(their #! line chooses the interpreter), in their own process group, with
SIGNET_RESULT_FILE set there; SIGTERM and SIGINT are forwarded to that group.
Afterwards the result file (a regular file of at most 4096 bytes, never
followed through a symlink) is written to the termination log; without a
valid file, a line starting "signet exec: " says why, so the check can never
pass.

Exit status: the script's, 128+n when signal n ended it, 3 when signet exec
ran nothing (digest mismatch, unreadable script, failed start), 2 usage.
(signet exec passes its script's status through: it is outside the table of
signet help exit-codes.)`,
		Example: "  # the pod backend's container command:\n" +
			"  /signet-bin/signet exec --script /signet-script/check.sh --digest sha256:0c19…",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Exec forwards SIGTERM itself; the root context's cancel on
			// the same signal must not count twice.
			code := kube.Exec(context.WithoutCancel(cmd.Context()), kube.ExecOptions{
				Script: o.Script, Digest: o.Digest, TerminationLog: o.TerminationLog, WorkDir: o.WorkDir,
				Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
			})
			if code != 0 {
				return exitCode(code, nil)
			}
			return nil
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func newInstallCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "install DST",
		Short:   "Copy this signet binary to DST (the check pod's init container)",
		Long:    "Copy the running signet binary to DST with mode 0555. A check pod's init container\nruns it from the signet image, which has no shell, to put signet exec into an emptyDir.",
		Example: "  /signet install /signet-bin/signet   # the check pod's init container, from the signet image",
		Hidden:  true,
		Args:    cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return kube.Install(args[0])
		},
	}
}
