package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

func init() { addCommand(newGetCmd) }

type getOptions struct {
	Config   string
	Addr     string
	Watch    bool
	Interval time.Duration
	Output   outputOptions
}

func (o *getOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Config, "config", "", "reconciler configuration file: the daemon's address is its listen")
	fs.StringVar(&o.Addr, "addr", "", "the daemon's listen address (default: the config's listen, else "+reconciler.DefaultListen+")")
	fs.BoolVarP(&o.Watch, "watch", "w", false, "after the list, print every row that changes until interrupted")
	fs.DurationVar(&o.Interval, "interval", 2*time.Second, "with --watch: how often to read the daemon's status")
	o.Output.AddFlags(fs)
}

// getResources are what `signet get` lists, each from the daemon's
// /status.
var getResources = map[string]func(*reconciler.Status) table{
	"requests": requestsTable,
	"runs":     runsTable,
	"nodes":    nodesTable,
}

func newGetCmd() *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get requests|runs|nodes [NAME...] [--addr ADDR | --config FILE]",
		Short: "List the running daemon's requests, runs or held nodes (its /status)",
		Long: `List what the running reconciler daemon sees, read from its GET /status on the main
listener (loopback by default; in a cluster, kubectl exec into the pod):

  requests  every CertificationRequest of the last pass: Ready, its reason, its run
  runs      every run this daemon knows: phase, verdict, nodes, retained nodes
  nodes     every node a run holds: running, or retained until an approved release

NAME limits the list to those requests, runs or nodes. With --watch, after the
list, every row that changes (or appears) is printed again as the daemon's status
changes, until interrupted; with -o json|yaml each change prints the whole list.
Exit status 0, or 2 when the daemon cannot be read (signet help exit-codes).`,
		Example: "  signet get requests --config /etc/signet/config/config.yaml\n" +
			"  signet get runs --addr 127.0.0.1:8080 -o yaml\n" +
			"  signet get nodes --watch\n" +
			"  kubectl -n signet-system exec deploy/signet-reconciler -- /signet get requests --config /etc/signet/config/config.yaml",
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return withPrefix(slices.Sorted(func(yield func(string) bool) {
					for k := range getResources {
						if !yield(k) {
							return
						}
					}
				}), toComplete), cobra.ShellCompDirectiveNoFileComp
			}
			return withPrefix(o.names(cmd.Context(), args[0]), toComplete), cobra.ShellCompDirectiveNoFileComp
		},
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			build, ok := getResources[args[0]]
			if !ok {
				return &usageError{fmt.Errorf("get: %q is not requests, runs or nodes", args[0])}
			}
			if err := o.Output.Validate(); err != nil {
				return err
			}
			if o.Interval <= 0 {
				return &usageError{fmt.Errorf("--interval: %s is not a positive duration", o.Interval)}
			}
			var cfg *reconciler.Config
			if o.Config != "" {
				var err error
				if cfg, err = reconciler.LoadConfig(o.Config); err != nil {
					return exitCode(exitUsage, err)
				}
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), daemonAddr(o.Addr, cfg), build, args[1:])
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// names are the names resource lists now, for completion: none when the
// daemon cannot be read.
func (o *getOptions) names(ctx context.Context, resource string) []string {
	build, ok := getResources[resource]
	if !ok {
		return nil
	}
	var cfg *reconciler.Config
	if o.Config != "" {
		c, err := reconciler.LoadConfig(o.Config)
		if err != nil {
			return nil
		}
		cfg = c
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	st, err := fetchStatus(ctx, daemonAddr(o.Addr, cfg))
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range build(st).rows {
		out = append(out, r.name)
	}
	return out
}

// run prints the table once, then, with --watch, the rows that change
// until ctx ends (exit 0).
func (o *getOptions) run(ctx context.Context, w io.Writer, addr string, build func(*reconciler.Status) table, names []string) error {
	st, err := fetchStatus(ctx, addr)
	if err != nil {
		return err
	}
	tab := build(st).only(names)
	if err := o.print(w, tab, nil, true); err != nil {
		return err
	}
	if !o.Watch {
		return nil
	}
	tk := time.NewTicker(o.Interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		st, err := fetchStatus(ctx, addr)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		next := build(st).only(names)
		if err := o.print(w, next, &tab, false); err != nil {
			return err
		}
		tab = next
	}
}

// print writes tab: as text, the header and the rows that differ from
// prev (all when prev is nil); as json or yaml, the whole list when it
// differs from prev.
func (o *getOptions) print(w io.Writer, tab table, prev *table, first bool) error {
	if o.Output.JSON() {
		if prev != nil && slices.EqualFunc(prev.rows, tab.rows, func(a, b row) bool { return slices.Equal(a.cells, b.cells) }) {
			return nil
		}
		if !first && o.Output.Format == "yaml" {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		return o.Output.Write(w, tab.items)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if first {
		fmt.Fprintln(tw, strings.Join(tab.header, "\t"))
	}
	for _, r := range tab.rows {
		if prev != nil && slices.ContainsFunc(prev.rows, func(p row) bool { return slices.Equal(p.cells, r.cells) }) {
			continue
		}
		fmt.Fprintln(tw, strings.Join(r.cells, "\t"))
	}
	return tw.Flush()
}

// table is one resource's list: text rows and the machine items.
type table struct {
	header []string
	rows   []row
	items  []any
}

type row struct {
	name  string
	cells []string
}

func (t table) add(name string, item any, cells ...string) table {
	t.rows = append(t.rows, row{name: name, cells: cells})
	t.items = append(t.items, item)
	return t
}

// only keeps the rows named in names (all when names is empty).
func (t table) only(names []string) table {
	if len(names) == 0 {
		return t
	}
	out := table{header: t.header, items: []any{}}
	for i, r := range t.rows {
		if slices.Contains(names, r.name) {
			out.rows = append(out.rows, r)
			out.items = append(out.items, t.items[i])
		}
	}
	return out
}

func requestsTable(st *reconciler.Status) table {
	t := table{header: []string{"NAME", "READY", "REASON", "RUN", "MESSAGE"}, items: []any{}}
	for _, o := range st.Objects {
		if o.Kind != specs.KindRequest {
			continue
		}
		ready, reason, msg := readyOf(o.Conditions)
		t = t.add(o.Name, o, o.Name, ready, reason, dash(o.Run), msg)
	}
	return t
}

func runsTable(st *reconciler.Status) table {
	t := table{header: []string{"ID", "PHASE", "VERDICT", "READY", "NODES", "RETAINED"}, items: []any{}}
	for _, r := range st.Runs {
		ready, _, _ := readyOf(r.Conditions)
		t = t.add(r.ID, r, r.ID, string(r.Phase), dash(string(r.Verdict)), ready, dash(strings.Join(r.Nodes, ",")), dash(strings.Join(r.Retained, ",")))
	}
	return t
}

// NodeHold is one node a run holds, as `signet get nodes -o json` prints
// it: State is "running" or "retained" (until an approved release).
type NodeHold struct {
	Node  string `json:"node"`
	Run   string `json:"run"`
	State string `json:"state"`
}

func nodesTable(st *reconciler.Status) table {
	t := table{header: []string{"NODE", "RUN", "STATE"}, items: []any{}}
	retained := map[string]bool{}
	for _, r := range st.Runs {
		for _, n := range r.Retained {
			retained[r.ID+"/"+n] = true
		}
	}
	nodes := make([]string, 0, len(st.Holds))
	for n := range st.Holds {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		h := NodeHold{Node: n, Run: st.Holds[n], State: "running"}
		if retained[h.Run+"/"+n] {
			h.State = "retained"
		}
		t = t.add(n, h, n, h.Run, h.State)
	}
	return t
}

// readyOf is the Ready condition's status, reason and message, "Unknown"
// when there is none.
func readyOf(cs []metav1.Condition) (status, reason, msg string) {
	c := apimeta.FindStatusCondition(cs, fluxmeta.ReadyCondition)
	if c == nil {
		return "Unknown", "-", ""
	}
	return string(c.Status), c.Reason, c.Message
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
