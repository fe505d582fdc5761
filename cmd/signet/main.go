// Command signet certifies groups of GPU nodes the GitOps way.
//
// Each subcommand lives in its own file and registers itself with
// addCommand from an init function; this file only builds the root
// command and maps errors to exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"signet.dev/signet/internal/procutil"
)

// exitError carries a documented exit code out of a command. Its message,
// when non-empty, has already been printed or is printed by main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitCode wraps err so that main exits with code. A nil err means the
// command already reported everything and only the code matters.
func exitCode(code int, err error) error { return &exitError{code: code, err: err} }

// usageError marks a mistake in the command line (exit 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

var commands []func() *cobra.Command

// addCommand registers a subcommand constructor with the root command.
func addCommand(f func() *cobra.Command) { commands = append(commands, f) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "signet",
		Short: "Certify groups of GPU nodes the GitOps way",
		Long:  "signet certifies groups of GPU nodes from a Git repository of certification profiles,\ndigest-pinned script bundles and approved requests, and records signed evidence on an\nappend-only evidence branch that auditors can verify offline.",
		Example: "  signet validate --repo examples/spec-repo overlays/cluster-b\n" +
			"  signet run --repo spec --request local-smoke-localhost --trust trust.yaml --key reconciler.key\n" +
			"  signet audit --repo https://git.example.invalid/fleet/specs.git --trust trust.yaml\n" +
			"  signet --version",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
	}
	root.SetVersionTemplate("signet {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	for _, f := range commands {
		root.AddCommand(f())
	}
	completeOutputFormats(root)
	registerCompletions(root)
	return root
}

// completeOutputFormats lets the shell complete --output with the formats
// each command accepts (outputOptions.AddFlags lists them in the usage).
func completeOutputFormats(c *cobra.Command) {
	if f := c.Flags().Lookup("output"); f != nil {
		if list, ok := strings.CutPrefix(f.Usage, "output format: "); ok {
			formats := strings.Split(list, ", ")
			_ = c.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
				return formats, cobra.ShellCompDirectiveNoFileComp
			})
		}
	}
	for _, sub := range c.Commands() {
		completeOutputFormats(sub)
	}
}

func main() {
	// No child (a check, git) gets a descriptor signet inherited without
	// close-on-exec (`signet run --key /dev/fd/7 7<key`).
	if err := procutil.CloseOnExecInherited(); err != nil {
		os.Exit(reportError(err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	os.Exit(reportError(err))
}

// reportError prints err to stderr and returns the process exit code:
// 0 for nil, the code of an exitError, and otherwise exitUsage (usage or
// I/O error: nothing was decided; exitcodes.go). A command reports
// findings with exitCode(exitFindings, …).
func reportError(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "signet:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "signet:", err)
	return exitUsage
}
