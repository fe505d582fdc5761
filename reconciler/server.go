package reconciler

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxWebhookBytes bounds a webhook request body.
const MaxWebhookBytes = 1 << 20

// WebhookSecrets are the shared secrets of the push-event receivers. An
// empty secret disables that receiver (it answers 404).
type WebhookSecrets struct {
	GitHub string
	GitLab string
}

// Handler serves /healthz, /readyz, /metrics, /status, the webhook
// receivers /hooks/github and /hooks/gitlab, and POST /reconcile (the
// trigger of `signet reconcile --now`).
func (r *Reconciler) Handler(gatherer prometheus.Gatherer, hooks WebhookSecrets) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			http.Error(w, "recovering", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r.Status())
	})
	mux.HandleFunc("POST /reconcile", func(w http.ResponseWriter, _ *http.Request) {
		r.Trigger()
		w.WriteHeader(http.StatusAccepted)
	})
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

func readBody(w http.ResponseWriter, req *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxWebhookBytes))
	if err != nil {
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return nil, false
	}
	return body, true
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
