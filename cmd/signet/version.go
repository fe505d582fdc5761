package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func init() { addCommand(newVersionCmd) }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print signet's version",
		Example: "  signet version\n  signet --version   # the same line",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "signet", versionString())
			return err
		},
	}
}

// versionString is the version, or for a development build "dev+" and
// the commit it was built from, as `signet version` and `signet
// --version` print it.
func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v = "dev+" + s.Value
			}
		}
	}
	return v
}
