package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"k8s.io/client-go/kubernetes"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/kube"
)

func init() { addCommand(newReconcileCmd) }

type reconcileOptions struct {
	Config    string
	Now       bool
	Addr      string
	TokenFile string
	// Wait, with Now: wait for the triggered pass and print what it did.
	Wait    bool
	Timeout time.Duration
	Output  outputOptions
	// AcceptCurrentTip trusts the evidence branch as it is now when no
	// tip is remembered or pinned (first start on an existing branch).
	AcceptCurrentTip bool
}

func (o *reconcileOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Config, "config", "", "reconciler configuration file (kind: ReconcilerConfig)")
	fs.BoolVar(&o.Now, "now", false, "ask a running daemon to reconcile now and exit")
	fs.StringVar(&o.Addr, "addr", "", "with --now: the daemon's listen address (default: the config's listen)")
	fs.StringVar(&o.TokenFile, "token-file", "", "with --now: the file holding the trigger's bearer token (default: the config's triggerTokenFile)")
	fs.BoolVar(&o.Wait, "wait", false, "with --now: wait until the pass it asked for has ended and print what it did")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "with --now --wait: how long to wait for the pass")
	o.Output.AddFlags(fs)
	fs.BoolVar(&o.AcceptCurrentTip, "accept-current-tip", false, "when no evidence tip is remembered or pinned (evidence.pinnedTip), trust the branch's current tip once (logged); remove the flag afterwards")
}

func newReconcileCmd() *cobra.Command {
	o := &reconcileOptions{}
	cmd := &cobra.Command{
		Use:   "reconcile --config FILE",
		Short: "Run the reconciler daemon (or trigger a running one with --now)",
		Long: `Run the pull-based reconciler: poll the spec repository, verify approvals against the
trust policy, run approved requests and commit signed evidence and receipts to the
evidence branch. Serves /healthz, /readyz, /status and POST /reconcile on listen
(loopback by default), and, when configured, /healthz and /readyz on probeListen,
/metrics on metricsListen and the webhook receivers on webhook.listen. With report.dir,
it rebuilds the HTML report of signet report there whenever the evidence branch moved
and serves it read-only at /report/ on listen. SIGTERM stops
it gracefully: every admitted run stays recoverable and resumes on the next start.

With --now, POST /reconcile to a running daemon with the bearer token of
triggerTokenFile (or --token-file). With --now --wait, wait (up to --timeout)
for the pass that starts after the request, and print its revision, whether
anything changed and what it admitted; -o json|yaml prints the pass as
/status's lastPass. Exit status 0 when the pass succeeded, 2 when it failed
or could not be waited for (signet help exit-codes).`,
		Example: "  signet reconcile --config /etc/signet/config/config.yaml\n" +
			"  signet reconcile --now --config /etc/signet/config/config.yaml         # trigger a pass of the running daemon\n" +
			"  signet reconcile --now --wait --config /etc/signet/config/config.yaml  # ... and wait for it\n" +
			"  signet reconcile --now --wait --addr 127.0.0.1:8080 --token-file token -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Config == "" && o.Addr == "" {
				return &usageError{errors.New("--config is required")}
			}
			if err := o.Output.Validate(); err != nil {
				return err
			}
			if o.Wait && !o.Now {
				return &usageError{errors.New("--wait goes with --now")}
			}
			var cfg *reconciler.Config
			if o.Config != "" {
				var err error
				if cfg, err = reconciler.LoadConfig(o.Config); err != nil {
					return exitCode(2, err)
				}
			}
			if o.Now {
				return triggerNow(cmd.Context(), cmd, o, cfg)
			}
			return runDaemon(cmd.Context(), cfg, reconciler.Options{AcceptCurrentTip: o.AcceptCurrentTip})
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func triggerNow(ctx context.Context, cmd *cobra.Command, o *reconcileOptions, cfg *reconciler.Config) error {
	addr := daemonAddr(o.Addr, cfg)
	tokenFile := o.TokenFile
	if tokenFile == "" && cfg != nil {
		tokenFile = cfg.TriggerTokenFile
	}
	if tokenFile == "" {
		return &usageError{errors.New("--now needs the trigger token: set triggerTokenFile in --config, or --token-file")}
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return exitCode(2, fmt.Errorf("trigger token: %w", err))
	}
	postCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(postCtx, http.MethodPost, "http://"+addr+"/reconcile", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("trigger the daemon at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("trigger the daemon at %s: %s", addr, resp.Status)
	}
	var ans reconciler.TriggerAnswer
	if o.Wait {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil || ans.Pass < 1 {
			return fmt.Errorf("trigger the daemon at %s: its answer names no pass to wait for (a daemon older than --wait?): %v", addr, err)
		}
	}
	w := cmd.OutOrStdout()
	if !o.Output.JSON() {
		fmt.Fprintln(w, "► reconcile requested")
	}
	if !o.Wait {
		return nil
	}
	if !o.Output.JSON() {
		fmt.Fprintf(w, "◎ waiting for pass %d\n", ans.Pass)
	}
	ps, err := waitForPass(ctx, addr, ans.Pass, o.Timeout)
	if err != nil {
		return err
	}
	if o.Output.JSON() {
		if err := o.Output.Write(w, ps); err != nil {
			return err
		}
	} else {
		printPass(w, ps)
	}
	if ps.Error != "" {
		return exitCode(exitUsage, fmt.Errorf("pass %d failed: %s", ps.Number, ps.Error))
	}
	return nil
}

// passOf returns pass number from st's recent passes once it ended. When
// st does not list it (a daemon that keeps no recent passes, or it fell
// out of them) it returns the first later pass that ended: it too started
// after the request. Nil while none did.
func passOf(st *reconciler.Status, number int64) *reconciler.PassStatus {
	if st == nil {
		return nil
	}
	for i := range st.Passes {
		if st.Passes[i].Number >= number {
			return &st.Passes[i]
		}
	}
	if st.LastPass != nil && st.LastPass.Number >= number {
		return st.LastPass
	}
	return nil
}

// passPoll is how often --wait reads /status.
const passPoll = 200 * time.Millisecond

// waitForPass reads the daemon's /status at addr until its lastPass is
// pass number or later, or timeout passes.
func waitForPass(ctx context.Context, addr string, number int64, timeout time.Duration) (*reconciler.PassStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(passPoll)
	defer t.Stop()
	for {
		st, err := fetchStatus(ctx, addr)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		if ps := passOf(st, number); ps != nil {
			return ps, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pass %d of the daemon at %s did not end within --timeout %s", number, addr, timeout)
		case <-t.C:
		}
	}
}

// printPass says what pass ps did, as `flux reconcile` does.
func printPass(w io.Writer, ps *reconciler.PassStatus) {
	took := ps.FinishedAt.Sub(ps.StartedAt).Round(time.Millisecond)
	switch {
	case ps.Error != "":
		fmt.Fprintf(w, "✗ pass %d failed after %s: %s\n", ps.Number, took, ps.Error)
	case ps.Noop:
		fmt.Fprintf(w, "✔ pass %d: revision %s unchanged, nothing to do (%s)\n", ps.Number, shortRev(ps.Revision), took)
	default:
		fmt.Fprintf(w, "✔ pass %d reconciled revision %s (%s)\n", ps.Number, shortRev(ps.Revision), took)
		if len(ps.Admitted) > 0 {
			fmt.Fprintf(w, "✔ admitted %s\n", strings.Join(ps.Admitted, ", "))
		} else {
			fmt.Fprintln(w, "✔ admitted no request (signet get requests says why each waits)")
		}
	}
}

func runDaemon(ctx context.Context, cfg *reconciler.Config, opts reconciler.Options) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	sec, err := reconciler.LoadSecrets(cfg)
	if err != nil {
		return exitCode(2, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reconciler.RegisterBuildInfo(reg, versionString())
	r, store, err := reconciler.Build(ctx, cfg, sec, log, reg, opts)
	if err != nil {
		return err
	}
	defer store.Close()
	srv, err := reconciler.Serve(r.Listeners(reg, sec), log)
	if err != nil {
		return err
	}
	log.Info("reconciler starting", "cluster", cfg.Cluster, "listen", srv.Addrs)
	act := func(ctx context.Context) error {
		if err := r.Recover(ctx); err != nil {
			log.Error("recovery failed", "error", err)
			return err
		}
		r.Start(ctx)
		<-ctx.Done()
		return nil
	}
	var runErr error
	if le := cfg.Kubernetes.LeaderElection; le != nil {
		runErr = leadThen(ctx, cfg, le, log, act)
	} else {
		runErr = act(ctx)
	}
	log.Info("stopping: every admitted run stays recoverable")
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(stopCtx)
	return errors.Join(runErr, r.Close(stopCtx))
}

// leadThen runs act only while this replica holds the leader Lease. A lost
// lease ends the process with an error (the Deployment restarts it as a
// follower): a replica that lost the lease must not act on anything.
func leadThen(ctx context.Context, cfg *reconciler.Config, le *reconciler.LeaderElectionConfig, log *slog.Logger, act func(context.Context) error) error {
	rc, err := kube.RESTConfig(cfg)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	id, _ := os.Hostname()
	if v := os.Getenv("POD_NAME"); v != "" {
		id = v
	}
	var actErr error
	err = kube.Lead(ctx, client, le.Namespace, le.Name, id, log, func(ctx context.Context) {
		actErr = act(ctx)
	})
	return errors.Join(err, actErr)
}
