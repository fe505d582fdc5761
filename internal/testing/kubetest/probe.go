package kubetest

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeReadiness runs c's readinessProbe against the running instance
// whose state is st until done is closed, setting st.ready and reporting
// each change; see Agent for what is simulated.
func (r *podRun) probeReadiness(done <-chan struct{}, st *ctrState, c corev1.Container) {
	p := c.ReadinessProbe
	period := time.Second
	if p.PeriodSeconds > 0 {
		period = min(period, time.Duration(p.PeriodSeconds)*time.Second)
	}
	timeout := time.Second
	if p.TimeoutSeconds > 0 {
		timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	failures, successes := int32(3), int32(1)
	if p.FailureThreshold > 0 {
		failures = p.FailureThreshold
	}
	if p.SuccessThreshold > 0 {
		successes = p.SuccessThreshold
	}
	wait := time.Duration(p.InitialDelaySeconds) * time.Second
	var failed, passed int32
	for {
		select {
		case <-done:
			return
		case <-r.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = period
		ok := probeOnce(c, p, timeout) == nil
		if ok {
			passed, failed = passed+1, 0
		} else {
			passed, failed = 0, failed+1
		}
		r.mu.Lock()
		select {
		case <-done: // the process ended during the probe
			r.mu.Unlock()
			return
		default:
		}
		changed := false
		switch {
		case ok && passed >= successes && !st.ready:
			st.ready, changed = true, true
		case !ok && failed >= failures && st.ready:
			st.ready, changed = false, true
		}
		r.mu.Unlock()
		if changed {
			r.report()
		}
	}
}

// probeOnce runs one httpGet probe; nil means success (HTTP 200–399).
func probeOnce(c corev1.Container, p *corev1.Probe, timeout time.Duration) error {
	g := p.HTTPGet
	if g == nil {
		return fmt.Errorf("container %q: only httpGet probes are supported by the kubetest agent", c.Name)
	}
	port := g.Port.IntValue()
	if g.Port.Type == intstr.String {
		port = 0
		for _, cp := range c.Ports {
			if cp.Name == g.Port.StrVal {
				port = int(cp.ContainerPort)
			}
		}
		if port == 0 {
			return fmt.Errorf("container %q: probe port %q is no named port of the container", c.Name, g.Port.StrVal)
		}
	}
	host := g.Host
	if host == "" {
		host = PodIP
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	req, err := http.NewRequest(http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+g.Path, nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	// As the kubelet: no certificate verification for HTTPS probes.
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet's probe semantics
		DisableKeepAlives: true,
	}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("probe %s: HTTP %d", req.URL, resp.StatusCode)
	}
	return nil
}
