package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// kubeletAPI plays the part of the kubelet's own HTTPS API that the API
// server reaches for pods/log (GET /containerLogs/NS/POD/CONTAINER), for
// every simulated node at once: each node's status names 127.0.0.1 as its
// InternalIP and this server's port as its kubelet endpoint, and the API
// server connects there as a kubelet client, as it does on a real cluster
// (--kubelet-client-certificate, --kubelet-certificate-authority,
// --kubelet-preferred-address-types InternalIP). Both sides are
// authenticated: the server's certificate is verified by the API server,
// and the API server's client certificate by the server, both issued by a
// CA of this environment. The logs are the Agents' (Agent.Logs) of a pod
// an agent runs and that still exists; tailLines and limitBytes are applied
// as the kubelet applies them (the last lines, then at most that many
// bytes). Any other query parameter (follow, previous, timestamps,
// sinceSeconds, sinceTime), and every other path of the kubelet's API
// (exec, attach, port-forward, metrics), are refused with 400 and 404, so
// that a test depending on them fails rather than passes on a guess.
type kubeletAPI struct {
	port int
	srv  *http.Server

	mu     sync.Mutex
	agents []*Agent
}

// kubeletFlags are the API server's flags for reaching kubeletAPI.
type kubeletFlags struct {
	clientCert, clientKey, ca string
}

// startKubeletAPI writes a CA, the server's certificate and the API
// server's client certificate into dir, and serves the kubelet API on a
// free loopback port until t ends.
func startKubeletAPI(t testing.TB, dir string) (*kubeletAPI, kubeletFlags) {
	t.Helper()
	ca := newTestCA(t, "kubetest-kubelet-ca")
	srvCert, srvKey := ca.issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, "kube-apiserver-kubelet-client", x509.ExtKeyUsageClientAuth)
	fl := kubeletFlags{
		clientCert: filepath.Join(dir, "kubelet-client.crt"),
		clientKey:  filepath.Join(dir, "kubelet-client.key"),
		ca:         filepath.Join(dir, "kubelet-ca.crt"),
	}
	writeFile(t, fl.clientCert, cliCert, 0o600)
	writeFile(t, fl.clientKey, cliKey, 0o600)
	writeFile(t, fl.ca, ca.pem, 0o600)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatalf("kubetest: kubelet API: %v", err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(ca.cert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kubetest: kubelet API: %v", err)
	}
	k := &kubeletAPI{port: ln.Addr().(*net.TCPAddr).Port}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", k.containerLogs)
	k.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{pair},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    clients,
			MinVersion:   tls.VersionTLS12,
		},
	}
	go func() { _ = k.srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = k.srv.Close() })
	return k, fl
}

func (k *kubeletAPI) add(a *Agent) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.agents = append(k.agents, a)
}

func (k *kubeletAPI) remove(a *Agent) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.agents = slices.DeleteFunc(k.agents, func(x *Agent) bool { return x == a })
}

// containerLogs answers GET /containerLogs/NS/POD/CONTAINER as the
// kubelet's server does for the parameters signet uses.
func (k *kubeletAPI) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, ctr := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	q := r.URL.Query()
	var tailLines, limitBytes int64 = -1, -1
	for name, vals := range q {
		v := vals[0]
		var err error
		switch name {
		case "tailLines":
			tailLines, err = strconv.ParseInt(v, 10, 64)
		case "limitBytes":
			limitBytes, err = strconv.ParseInt(v, 10, 64)
		case "follow", "previous", "timestamps":
			if v == "false" {
				continue
			}
			err = errors.New("not simulated by kubetest")
		default:
			err = errors.New("not simulated by kubetest")
		}
		if err != nil {
			http.Error(w, fmt.Sprintf("query parameter %s=%q: %v", name, v, err), http.StatusBadRequest)
			return
		}
	}
	k.mu.Lock()
	agents := slices.Clone(k.agents)
	k.mu.Unlock()
	for _, a := range agents {
		out, found, started := a.containerLog(ns, pod, ctr)
		if !found {
			continue
		}
		if !started {
			http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start", ctr, pod), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(logWindow(out, tailLines, limitBytes))
		return
	}
	http.Error(w, fmt.Sprintf("pod %s/%s not found", ns, pod), http.StatusNotFound)
}

// logWindow is what the kubelet returns of log: its last tailLines lines
// (all when negative), then at most limitBytes bytes of them (all when
// negative).
func logWindow(log []byte, tailLines, limitBytes int64) []byte {
	if tailLines >= 0 {
		// Lines end with '\n'; a last line without one is a line too.
		start, body := len(log), bytes.TrimSuffix(log, []byte("\n"))
		for range tailLines {
			i := bytes.LastIndexByte(body, '\n')
			if i < 0 {
				start = 0
				break
			}
			start, body = i+1, body[:i]
		}
		log = log[start:]
	}
	if limitBytes >= 0 && int64(len(log)) > limitBytes {
		log = log[:limitBytes]
	}
	return log
}

// testCA issues certificates for the harness's own servers and clients.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	next int64
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, key := certify(t, tmpl, nil, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), next: 2}
}

// issue returns a certificate for cn (for a server, cn is the IP address
// it also holds as a SAN) and its key, both PEM.
func (ca *testCA) issue(t testing.TB, cn string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.next), Subject: pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	ca.next++
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, key := certify(t, tmpl, ca.cert, ca.key)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// certify makes a fresh key and tmpl's certificate for it, valid from an
// hour ago for a day, signed by parent's key (self-signed when parent is
// nil), and returns the certificate's DER and the key.
func certify(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return der, key
}

// containerLog is the log of container ctr of pod ns/name if this agent
// runs that pod and it still exists (found), and whether the container
// ever started.
func (a *Agent) containerLog(ns, name, ctr string) (log []byte, found, started bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.pods {
		if r.pod.Namespace != ns || r.pod.Name != name || errors.Is(context.Cause(r.ctx), errPodGone) {
			continue
		}
		tl := a.logs[ns+"/"+name+"/"+ctr]
		if tl == nil {
			return nil, true, false
		}
		return tl.Bytes(), true, true
	}
	return nil, false, false
}
