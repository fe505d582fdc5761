// Package kubetest starts a real Kubernetes control plane for tests: etcd
// (Debian's etcd-server), kube-apiserver, kube-scheduler and
// kube-controller-manager (built from the k8s.io/kubernetes module by
// `make kube-tools` into the module root's bin/), all on free loopback ports
// of this machine, with certificates, tokens and a service-account key pair
// generated per environment. Nothing of the control plane is faked: the real
// scheduler binds pods (taints, tolerations, cordons and node affinity are
// really enforced) and the real controller-manager runs the garbage collector
// and the other default controllers.
//
// The node lifecycle controller is disabled unless Options.NodeLifecycle
// (`--controllers=*,-node-lifecycle-controller`, alias nodelifecycle): no kubelet runs here, so it would mark
// every simulated node NotReady/Unknown after its grace period and taint it
// unreachable. Instead the node helpers of this package play that part:
// CreateNode reports the node Ready and LiftNotReadyTaint removes the
// `node.kubernetes.io/not-ready` taint that admission puts on every new Node.
// Consequently the lifecycle controller's own `node.kubernetes.io/unschedulable`
// taint never appears on a cordoned node; the scheduler still refuses a
// cordoned node (its NodeUnschedulable plugin reads spec.unschedulable).
//
// The API server runs with --allow-privileged=true and its default
// admission plugins (Pod Security among them), as real clusters do, so that
// what refuses a pod in a test is a namespace's Pod Security level or a
// policy under test, never the harness.
//
// The TTL controller (`-ttl-controller`) is disabled too: it only annotates
// Nodes with node.alpha.kubernetes.io/ttl, a cache hint for kubelets, at a
// moment of its own choosing, which would make every test that compares a
// node before and after a reservation flaky.
//
// Every process runs in its own process group and is stopped by its PID
// (TERM, grace, KILL) in t.Cleanup; logs are kept in the test's temporary
// directory and their tails printed when the test fails.
package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"signet.dev/signet/internal/procutil"
)

// settleWait bounds the harness's waits for what it set up to take effect
// (a CRD served, a ClusterQueue Active, a webhook loaded): generous, since
// they are not what a test measures, and CI runs two Kubernetes tests at
// once on two cores. (A Kueue test once failed in CI 41 s in, in its
// set-up, before any assertion; these waits were 30 s then, the likeliest
// cause the log left.)
const settleWait = 2 * time.Minute

// AdminUser is the harness's own identity, a member of system:masters.
const AdminUser = "admin"

// User is an identity of the API server's static token file.
type User struct {
	Name   string
	Groups []string // besides system:authenticated, which every token user has
}

// DefaultUsers are the unprivileged identities Start provides. None of them
// is in a privileged group and no RBAC binding names them at start: a test
// grants them what it means to test.
var DefaultUsers = []User{
	{Name: "alice"},
	{Name: "bob"},
	{Name: "signet-reconciler"},
}

// Options configures StartWith.
type Options struct {
	// Users are the unprivileged identities besides AdminUser; nil means
	// DefaultUsers.
	Users []User
	// NodeLifecycle runs the controller-manager's node lifecycle controller
	// as a real cluster does (it taints a cordoned node
	// node.kubernetes.io/unschedulable:NoSchedule, lifts the not-ready
	// taint of a Ready node, and marks a node whose kubelet goes silent
	// NotReady/Unknown and taints it). Nodes made by CreateNode then get a
	// kubelet's heartbeat (see CreateNode). Off by default: see the package
	// doc.
	NodeLifecycle bool
}

// Env is a running control plane.
type Env struct {
	// Config is the admin's client configuration (system:masters).
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
	// Dir holds the environment's certificates, tokens, kubeconfig and logs.
	Dir string
	// StartupTime is how long Start took until every process ran and the
	// API server answered /readyz.
	StartupTime time.Duration

	t       testing.TB
	opts    Options
	beats   *heartbeats
	kubelet *kubeletAPI
	tokens  map[string]string
	caData  []byte
	host    string
	procs   []*proc
	dumped  bool
}

// Start starts etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager with DefaultUsers and returns once the API server
// is ready. The test fails (never skips) when a binary is missing.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Env {
	t.Helper()
	begin := time.Now()
	bins := binaries(t)
	users := opts.Users
	if users == nil {
		users = DefaultUsers
	}
	dir := t.TempDir()
	e := &Env{t: t, Dir: dir, tokens: map[string]string{}, opts: opts}
	t.Cleanup(e.stop)

	// Token file and service-account key pair.
	var csv strings.Builder
	add := func(name string, groups []string) {
		tok := randHex(t, 24)
		e.tokens[name] = tok
		fmt.Fprintf(&csv, "%s,%s,%s", tok, name, "uid-"+name)
		if len(groups) > 0 {
			fmt.Fprintf(&csv, ",\"%s\"", strings.Join(groups, ","))
		}
		csv.WriteString("\n")
	}
	add(AdminUser, []string{"system:masters"})
	for _, u := range users {
		if u.Name == AdminUser || e.tokens[u.Name] != "" {
			t.Fatalf("kubetest: duplicate user %q", u.Name)
		}
		add(u.Name, u.Groups)
	}
	tokensFile := filepath.Join(dir, "tokens.csv")
	writeFile(t, tokensFile, []byte(csv.String()), 0o600)
	saKey, saPub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	writeServiceAccountKeys(t, saKey, saPub)

	// etcd, then kube-apiserver: each retried on fresh ports should a port
	// picked free have been taken meanwhile by another process.
	var etcdURL string
	retryPorts(t, e, "etcd", func(attempt int) (*proc, error) {
		client, peer := freePort(t), freePort(t)
		etcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		p := e.startProc(fmt.Sprintf("etcd-%d", attempt), bins.etcd,
			"--name", "default",
			"--data-dir", filepath.Join(dir, fmt.Sprintf("etcd-data-%d", attempt)),
			"--listen-client-urls", etcdURL,
			"--advertise-client-urls", etcdURL,
			"--listen-peer-urls", peerURL,
			"--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "default="+peerURL,
			"--initial-cluster-state", "new",
			"--logger", "zap",
			"--log-level", "warn",
		)
		return p, waitFor(p, 60*time.Second, func() error {
			return httpOK(http.DefaultClient, etcdURL+"/health", "")
		})
	})

	certDir := filepath.Join(dir, "certs")
	kubelet, kubeletFl := startKubeletAPI(t, dir)
	e.kubelet = kubelet
	retryPorts(t, e, "kube-apiserver", func(attempt int) (*proc, error) {
		port := freePort(t)
		e.host = "https://127.0.0.1:" + strconv.Itoa(port)
		p := e.startProc(fmt.Sprintf("kube-apiserver-%d", attempt), bins.apiserver,
			"--etcd-servers", etcdURL,
			"--etcd-prefix", fmt.Sprintf("/registry-%d", attempt),
			"--secure-port", strconv.Itoa(port),
			"--bind-address", "127.0.0.1",
			// The address published in the kubernetes Service's endpoints;
			// nothing connects to it here. A documentation address
			// (TEST-NET-2) keeps start-up independent of the host's routes
			// and valid for Endpoints, which refuse loopback addresses.
			"--advertise-address", "198.51.100.1",
			"--cert-dir", certDir,
			"--service-account-issuer", "https://kubernetes.default.svc",
			"--service-account-key-file", saPub,
			"--service-account-signing-key-file", saKey,
			"--token-auth-file", tokensFile,
			"--authorization-mode", "RBAC",
			"--service-cluster-ip-range", "10.0.0.0/24",
			"--disable-admission-plugins", "ServiceAccount",
			// As real clusters run: privileged pods allowed by the API
			// server, so that what refuses them is Pod Security admission
			// (on by default) and signet's own policies, never this flag.
			"--allow-privileged=true",
			"--profiling=false",
			// pods/log reaches the simulated nodes' kubelet API
			// (kubeletAPI) at their InternalIP, both sides verified.
			"--kubelet-preferred-address-types", "InternalIP",
			"--kubelet-client-certificate", kubeletFl.clientCert,
			"--kubelet-client-key", kubeletFl.clientKey,
			"--kubelet-certificate-authority", kubeletFl.ca,
		)
		return p, waitFor(p, 120*time.Second, func() error {
			ca, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return errors.New("no certificate in apiserver.crt yet")
			}
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			}}
			if err := httpOK(c, e.host+"/readyz", e.tokens[AdminUser]); err != nil {
				return err
			}
			e.caData = ca
			return nil
		})
	})

	e.Config = e.configFor(AdminUser)
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("kubetest: clientset: %v", err)
	}
	e.Client = cs

	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	writeFile(t, kubeconfig, e.Kubeconfig(AdminUser), 0o600)
	e.startProc("kube-scheduler", bins.scheduler,
		"--kubeconfig", kubeconfig,
		"--authentication-kubeconfig", kubeconfig,
		"--authorization-kubeconfig", kubeconfig,
		"--secure-port", "0",
		"--leader-elect=false",
	)
	controllers := "*,-node-lifecycle-controller,-ttl-controller"
	if opts.NodeLifecycle {
		controllers = "*,-ttl-controller"
		e.beats = startHeartbeats(e)
	}
	e.startProc("kube-controller-manager", bins.controllerManager,
		"--kubeconfig", kubeconfig,
		"--secure-port", "0",
		"--leader-elect=false",
		"--service-account-private-key-file", saKey,
		"--controllers", controllers,
	)
	// Both run once they answer nothing but their own logs; make sure they
	// did not exit at once (bad flag, unreachable API server).
	time.Sleep(500 * time.Millisecond)
	for _, p := range e.procs[len(e.procs)-2:] {
		if p.exited() {
			e.dumpLogs()
			t.Fatalf("kubetest: %s exited at start: %v", p.name, p.waitErr)
		}
	}
	e.StartupTime = time.Since(begin)
	t.Logf("kubetest: control plane at %s ready in %v (logs in %s)", e.host, e.StartupTime.Round(time.Millisecond), dir)
	return e
}

// Host is the API server's URL.
func (e *Env) Host() string { return e.host }

// Token returns user's bearer token.
func (e *Env) Token(user string) string {
	tok, ok := e.tokens[user]
	if !ok {
		e.t.Fatalf("kubetest: no user %q in the token file", user)
	}
	return tok
}

// ConfigFor returns a client configuration authenticating as user, one of
// the identities of the token file (AdminUser or one of Options.Users). The
// test fails for an unknown user.
func (e *Env) ConfigFor(user string) *rest.Config {
	e.t.Helper()
	return e.configFor(user)
}

// ClientFor returns a clientset authenticating as user (see ConfigFor).
func (e *Env) ClientFor(user string) kubernetes.Interface {
	e.t.Helper()
	cs, err := kubernetes.NewForConfig(e.configFor(user))
	if err != nil {
		e.t.Fatalf("kubetest: clientset for %s: %v", user, err)
	}
	return cs
}

func (e *Env) configFor(user string) *rest.Config {
	return &rest.Config{
		Host:            e.host,
		BearerToken:     e.Token(user),
		TLSClientConfig: rest.TLSClientConfig{CAData: bytes.Clone(e.caData)},
		QPS:             200,
		Burst:           400,
		UserAgent:       "kubetest/" + user,
	}
}

// Kubeconfig returns a kubeconfig file's bytes authenticating as user, for
// stock tools (kubectl) and the control plane's own components.
func (e *Env) Kubeconfig(user string) []byte {
	e.t.Helper()
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: %s
current-context: kubetest
`, e.host, b64(e.caData), user, e.Token(user), user)
}

// LogTail returns the last n bytes of the named process's log
// ("kube-apiserver-0", "etcd-0", "kube-scheduler", "kube-controller-manager").
func (e *Env) LogTail(name string, n int) string {
	for _, p := range e.procs {
		if p.name == name {
			return tailFile(p.log, n)
		}
	}
	return ""
}

type bins struct{ etcd, apiserver, scheduler, controllerManager string }

// ModuleRoot is the signet module's root directory.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

func binaries(t testing.TB) bins {
	t.Helper()
	bin := filepath.Join(ModuleRoot(), "bin")
	var missing []string
	find := func(name string, path bool) string {
		p := filepath.Join(bin, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
		if path {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		missing = append(missing, name)
		return ""
	}
	b := bins{
		etcd:              find("etcd", true),
		apiserver:         find("kube-apiserver", false),
		scheduler:         find("kube-scheduler", false),
		controllerManager: find("kube-controller-manager", false),
	}
	if len(missing) > 0 {
		t.Fatalf("kubetest: %s not found in %s (etcd: also PATH): run make kube-tools", strings.Join(missing, ", "), bin)
	}
	return b
}

// proc is one control-plane process, in its own process group.
type proc struct {
	name    string
	log     string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (e *Env) startProc(name, bin string, args ...string) *proc {
	e.t.Helper()
	logPath := filepath.Join(e.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		e.t.Fatalf("kubetest: %v", err)
	}
	defer f.Close()
	fmt.Fprintf(f, "# %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = e.Dir
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group, so that stopping it reaches nothing else; KILL
	// should the test process die without running its cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("kubetest: start %s: %v", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	e.procs = append(e.procs, p)
	return p
}

// stopProc stops p's process group by p's PID: TERM, 10 s grace, KILL.
func (e *Env) stopProc(p *proc) {
	pgid := p.cmd.Process.Pid
	if _, _, err := procutil.StopGroup(pgid, time.Time{}, 10*time.Second); err != nil {
		e.t.Errorf("kubetest: stop %s (pid %d): %v", p.name, pgid, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		e.t.Errorf("kubetest: %s (pid %d) not reaped", p.name, pgid)
	}
}

// stop runs in t.Cleanup: log tails on failure, then every process stopped
// in reverse order of start.
func (e *Env) stop() {
	if e.t.Failed() {
		e.dumpLogs()
	}
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.stopProc(e.procs[i])
	}
}

func (e *Env) dumpLogs() {
	if e.dumped {
		return
	}
	e.dumped = true
	for _, p := range e.procs {
		e.t.Logf("kubetest: ---- tail of %s (%s) ----\n%s", p.name, p.log, tailFile(p.log, 4000))
	}
}

// retryPorts runs start up to three times while the process fails with an
// address already in use; any other failure fails the test with the logs.
func retryPorts(t testing.TB, e *Env, what string, start func(attempt int) (*proc, error)) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		p, err := start(attempt)
		if err == nil {
			return
		}
		inUse := strings.Contains(tailFile(p.log, 1<<16), "address already in use")
		e.stopProc(p)
		if inUse && attempt < 2 {
			t.Logf("kubetest: %s: port taken meanwhile, retrying on other ports", what)
			continue
		}
		e.dumpLogs()
		t.Fatalf("kubetest: %s not ready: %v", what, err)
	}
}

// waitFor polls ready until it succeeds, p exits, or timeout passes.
func waitFor(p *proc, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%s exited: %v (last probe: %v)", p.name, p.waitErr, last)
		}
		if last = ready(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %v", p.name, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func httpOK(c *http.Client, url, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kubetest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeServiceAccountKeys(t testing.TB, keyPath, pubPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("kubetest: service-account key: %v", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("kubetest: service-account key: %v", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatalf("kubetest: service-account key: %v", err)
	}
	writeFile(t, keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
	writeFile(t, pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
}

func randHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return hex.EncodeToString(b)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
