package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/specs"
)

// completionTimeout bounds what one completion reads.
const completionTimeout = 5 * time.Second

// registerCompletions lets the shell complete, besides --output
// (completeOutputFormats): request names (run --request), object
// references (sign --object; with --action, requests only) from the spec
// repository's working tree, and run IDs (verify RUN, logs RUN) from the
// evidence branch's index. A completion that cannot read its source
// offers nothing; it never decides anything (nothing is verified).
func registerCompletions(root *cobra.Command) {
	for _, c := range root.Commands() {
		switch c.Name() {
		case "run":
			_ = c.RegisterFlagCompletionFunc("request", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				repo, _ := cmd.Flags().GetString("repo")
				dir, _ := cmd.Flags().GetString("path")
				return withPrefix(specRefs(repo, dir, false, true), toComplete), cobra.ShellCompDirectiveNoFileComp
			})
		case "sign":
			_ = c.RegisterFlagCompletionFunc("object", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				repo, _ := cmd.Flags().GetString("repo")
				dir, _ := cmd.Flags().GetString("path") // deprecated form of PATH
				if len(args) > 0 {
					dir = args[0]
				}
				action, _ := cmd.Flags().GetString("action")
				return withPrefix(specRefs(repo, dir, true, action != ""), toComplete), cobra.ShellCompDirectiveNoFileComp
			})
		case "verify", "logs":
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return withPrefix(runIDs(cmd), toComplete), cobra.ShellCompDirectiveNoFileComp
			}
		}
	}
}

// specRefs renders the spec path p (PATH, or run's --path; "" for the
// root) of the spec repository's working tree repo (--repo) and returns
// its objects as KIND/NAME (withKind) or NAME, requests only when
// requestsOnly.
func specRefs(repo, p string, withKind, requestsOnly bool) []string {
	if repo == "" {
		repo = "."
	}
	st, err := os.Stat(repo)
	if err != nil || !st.IsDir() {
		return nil
	}
	if p == "" {
		p = "."
	}
	dir, err := specPathArg(repo, p, false)
	if err != nil {
		return nil
	}
	r, err := specs.Render(os.DirFS(repo), dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, o := range r.Objects {
		if requestsOnly && o.Kind != specs.KindRequest {
			continue
		}
		if withKind {
			out = append(out, o.Ref())
		} else {
			out = append(out, o.Name)
		}
	}
	return out
}

// runIDs lists the run IDs of the evidence branch that --repo and
// --branch name, of --cluster when set.
func runIDs(cmd *cobra.Command) []string {
	repo, _ := cmd.Flags().GetString("repo")
	if repo == "" {
		return nil
	}
	branch, _ := cmd.Flags().GetString("branch")
	cluster, _ := cmd.Flags().GetString("cluster")
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	ids, err := audit.RunIDs(ctx, repo, evidence.Auth{}, branch, cluster)
	if err != nil {
		cobra.CompDebugln(fmt.Sprintf("run IDs of %s: %v", repo, err), false)
		return nil
	}
	return ids
}

// withPrefix keeps the candidates that start with what is typed.
func withPrefix(candidates []string, toComplete string) []string {
	var out []string
	for _, c := range candidates {
		if strings.HasPrefix(c, toComplete) {
			out = append(out, c)
		}
	}
	return out
}
