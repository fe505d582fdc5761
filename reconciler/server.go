package reconciler

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxWebhookBytes bounds a webhook request body.
const MaxWebhookBytes = 1 << 20

// The bounds of every server the daemon runs (NewHTTPServer): a client
// that sends its headers or its body slowly, reads the answer slowly or
// holds an idle connection is cut off, and a request's headers are
// bounded.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 60 * time.Second
	MaxHeaderBytes    = 16 << 10
)

// WebhookSecrets are the shared secrets of the push-event receivers. An
// empty secret disables that receiver (it answers 404).
type WebhookSecrets struct {
	GitHub string
	GitLab string
}

// Listener is one HTTP listener of the daemon: a name for logs, the
// configured address and what it serves.
type Listener struct {
	Name    string
	Addr    string
	Handler http.Handler
}

// Listeners returns the daemon's listeners, each only when its address is
// configured (Listen always, DefaultListen when unset):
//   - "main" (listen): /healthz, /readyz, /status and POST /reconcile,
//     and with report.dir the report's files read-only under /report/;
//   - "probe" (probeListen): /healthz and /readyz only, for the kubelet;
//   - "metrics" (metricsListen): /metrics only;
//   - "webhook" (webhook.listen): /hooks/github and /hooks/gitlab.
//
// POST /reconcile takes the bearer token of triggerTokenFile (without one
// configured it answers 404, as a webhook receiver without its secret
// does) and answers 202 with a TriggerAnswer; /status's lastPass says when
// that pass has ended.
func (r *Reconciler) Listeners(gatherer prometheus.Gatherer, sec *Secrets) []Listener {
	main := http.NewServeMux()
	r.health(main)
	main.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r.Status())
	})
	if r.cfg.Report.Dir != "" {
		main.Handle("GET /report/", reportFiles(r.cfg.Report.Dir))
	}
	main.HandleFunc("POST /reconcile", func(w http.ResponseWriter, req *http.Request) {
		if sec.TriggerToken == "" {
			http.NotFound(w, req)
			return
		}
		if !validBearer(sec.TriggerToken, req.Header.Get("Authorization")) {
			r.log.Warn("trigger refused: bad token", "receiver", "reconcile")
			w.Header().Set("WWW-Authenticate", `Bearer realm="signet"`)
			http.Error(w, "token does not match", http.StatusUnauthorized)
			return
		}
		ans := TriggerAnswer{Pass: r.Trigger()}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(ans)
	})
	addr := r.cfg.Listen
	if addr == "" {
		addr = DefaultListen
	}
	out := []Listener{{Name: "main", Addr: addr, Handler: main}}
	if r.cfg.ProbeListen != "" {
		probe := http.NewServeMux()
		r.health(probe)
		out = append(out, Listener{Name: "probe", Addr: r.cfg.ProbeListen, Handler: probe})
	}
	if r.cfg.MetricsListen != "" {
		metrics := http.NewServeMux()
		metrics.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
		out = append(out, Listener{Name: "metrics", Addr: r.cfg.MetricsListen, Handler: metrics})
	}
	if r.cfg.Webhook.Listen != "" {
		out = append(out, Listener{Name: "webhook", Addr: r.cfg.Webhook.Listen, Handler: r.webhooks(sec.Webhooks)})
	}
	return out
}

// health serves /healthz (the process answers) and /readyz (recovery is
// done) on mux.
func (r *Reconciler) health(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			http.Error(w, "recovering", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
}

// webhooks serves the push-event receivers.
func (r *Reconciler) webhooks(hooks WebhookSecrets) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/github", func(w http.ResponseWriter, req *http.Request) {
		if hooks.GitHub == "" {
			http.NotFound(w, req)
			return
		}
		body, ok := readBody(w, req)
		if !ok {
			return
		}
		if !validGitHubSignature(hooks.GitHub, body, req.Header.Get("X-Hub-Signature-256")) {
			r.log.Warn("webhook refused: bad signature", "receiver", "github")
			http.Error(w, "signature does not match", http.StatusUnauthorized)
			return
		}
		switch req.Header.Get("X-GitHub-Event") {
		case "push":
			r.Trigger()
			w.WriteHeader(http.StatusAccepted)
		case "ping":
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /hooks/gitlab", func(w http.ResponseWriter, req *http.Request) {
		if hooks.GitLab == "" {
			http.NotFound(w, req)
			return
		}
		if _, ok := readBody(w, req); !ok {
			return
		}
		if subtle.ConstantTimeCompare([]byte(req.Header.Get("X-Gitlab-Token")), []byte(hooks.GitLab)) != 1 {
			r.log.Warn("webhook refused: bad token", "receiver", "gitlab")
			http.Error(w, "token does not match", http.StatusUnauthorized)
			return
		}
		if req.Header.Get("X-Gitlab-Event") != "Push Hook" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		r.Trigger()
		w.WriteHeader(http.StatusAccepted)
	})
	return mux
}

// NewHTTPServer returns a server for h with the daemon's bounds
// (ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout,
// MaxHeaderBytes); its errors are logged to log.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Servers are the daemon's running listeners.
type Servers struct {
	// Addrs are the bound addresses by listener name.
	Addrs   map[string]string
	servers []*http.Server
}

// Serve binds every listener (all or none: a failed bind closes those
// already bound) and serves each on its own goroutine.
func Serve(ls []Listener, log *slog.Logger) (*Servers, error) {
	s := &Servers{Addrs: map[string]string{}}
	var lns []net.Listener
	for _, l := range ls {
		ln, err := net.Listen("tcp", l.Addr)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return nil, fmt.Errorf("%s listener: %w", l.Name, err)
		}
		lns = append(lns, ln)
		s.Addrs[l.Name] = ln.Addr().String()
	}
	for i, l := range ls {
		srv := NewHTTPServer(l.Handler, log)
		s.servers = append(s.servers, srv)
		go func() {
			if err := srv.Serve(lns[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "listener", l.Name, "error", err)
			}
		}()
	}
	return s, nil
}

// Shutdown stops every listener, letting requests in flight finish until
// ctx ends.
func (s *Servers) Shutdown(ctx context.Context) error {
	var errs []error
	for _, srv := range s.servers {
		errs = append(errs, srv.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

func readBody(w http.ResponseWriter, req *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxWebhookBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		} else {
			http.Error(w, "body unreadable", http.StatusBadRequest)
		}
		return nil, false
	}
	return body, true
}

// validBearer checks an Authorization header "Bearer <token>" against
// token in constant time.
func validBearer(token, header string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// validGitHubSignature checks GitHub's X-Hub-Signature-256 header:
// "sha256=" + hex HMAC-SHA256 of the body under the shared secret.
func validGitHubSignature(secret string, body []byte, header string) bool {
	got, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	sig, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(sig, mac.Sum(nil))
}
