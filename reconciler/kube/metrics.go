package kube

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// requestsName is the counter of the requests the reconciler's
// Kubernetes clients send.
const requestsName = "signet_kube_requests_total"

// newRequestsCounter creates signet_kube_requests_total{verb, code} and
// registers it with reg (when not nil). It is per reconciler, unlike
// client-go's process-wide tools/metrics.
func newRequestsCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: requestsName,
		Help: "Requests sent to the Kubernetes API server, by Kubernetes verb (get, list, watch, create, update, patch, delete, deletecollection) and HTTP status code (\"error\" when no response came).",
	}, []string{"verb", "code"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// countRequests returns a rest.Config transport wrapper that counts
// every request passing through it in c, once, when its response (or
// error) arrives; a watch counts when its stream opens.
func countRequests(c *prometheus.CounterVec) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			code := "error"
			if err == nil {
				code = strconv.Itoa(resp.StatusCode)
			}
			c.WithLabelValues(verb(req), code).Inc()
			return resp, err
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// verb is the Kubernetes verb of req, derived from its method and path
// as the API server's RequestInfo does for resource requests
// (/api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]], likewise under
// /apis/GROUP/VERSION): a GET without a name is a list, or a watch with
// ?watch=true; a DELETE without a name is a deletecollection. Any other
// method is "other", so the label's values stay bounded.
func verb(req *http.Request) string {
	switch req.Method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodGet, http.MethodDelete:
	default:
		return "other"
	}
	named := hasName(req.URL.Path)
	if req.Method == http.MethodDelete {
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
		return "watch"
	}
	if named {
		return "get"
	}
	return "list"
}

// hasName reports whether a resource path names one object; a path that
// is not a resource path (discovery, /version) counts as named, so that a
// GET of it is a get.
func hasName(p string) bool {
	parts, ok := resourceParts(p)
	return !ok || len(parts) != 1
}

// resourceParts returns the elements of a resource path after its API
// group and version and its namespace (resource, then name and
// subresource when present); false for a path that is not a resource
// path.
func resourceParts(p string) ([]string, bool) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return nil, false
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	return parts, true
}
