// Package gittest gives tests a real Git smart-HTTP server (stock
// `git http-backend` served through net/http/cgi on loopback) and a way to
// run the stock git CLI in an isolated environment. It never fakes Git:
// every byte a test pushes or fetches goes through the real git binaries.
package gittest

import (
	"bytes"
	"crypto/subtle"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Auth is what a Server demands from clients. The zero value lets everyone in.
type Auth struct {
	// Token, when set, is accepted as "Authorization: Bearer <Token>" and as
	// the password of HTTP basic auth with any user name.
	Token string
	// Username and Password, when set, are accepted as HTTP basic auth.
	Username, Password string
}

func (a Auth) required() bool { return a.Token != "" || a.Password != "" }

// Server is a smart-HTTP Git server over a temporary directory of bare
// repositories, listening on 127.0.0.1 at a random port.
type Server struct {
	t    testing.TB
	root string
	auth Auth
	srv  *httptest.Server

	requests atomic.Int64
	denied   atomic.Int64
}

// Option configures a Server.
type Option func(*Server)

// WithAuth makes the server refuse requests that do not carry a.
func WithAuth(a Auth) Option { return func(s *Server) { s.auth = a } }

// NewHTTPServer starts a server that is closed when the test ends.
func NewHTTPServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{t: t, root: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	gitPath, err := exec.LookPath("git")
	require.NoError(t, err, "stock git is needed for the smart-HTTP test server")
	backend := &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Dir:  s.root,
		Env: append(isolatedEnv(),
			"GIT_PROJECT_ROOT="+s.root,
			"GIT_HTTP_EXPORT_ALL=1",
			// http-backend only allows receive-pack to an authenticated
			// user unless http.receivepack is set; it is set per repo too.
			"REMOTE_USER=signet-test",
		),
		InheritEnv: []string{"PATH"},
		// What git says on stderr (a refused ref update, a hook's words)
		// goes to the test log, not the terminal.
		Stderr: logWriter{t},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.srv = &httptest.Server{
		Listener: l,
		Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.requests.Add(1)
			if !s.authorized(r) {
				s.denied.Add(1)
				w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			backend.ServeHTTP(flushing{w}, r)
		})},
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

// flushing sends each write of the CGI's output to the client at once, as
// a Git server in front of http-backend does: net/http/cgi copies the
// output into the response's buffer, which would hold upload-pack's
// keepalives (5 bytes every 5 s while pack-objects counts a large branch)
// until the pack's first kilobytes, so that a client saw a silent remote.
type flushing struct{ http.ResponseWriter }

func (f flushing) Write(p []byte) (int, error) {
	n, err := f.ResponseWriter.Write(p)
	if fl, ok := f.ResponseWriter.(http.Flusher); ok && err == nil {
		fl.Flush()
	}
	return n, err
}

func (s *Server) authorized(r *http.Request) bool {
	if !s.auth.required() {
		return true
	}
	eq := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	h := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok && s.auth.Token != "" {
		return eq(tok, s.auth.Token)
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	if s.auth.Token != "" && eq(pass, s.auth.Token) {
		return true
	}
	return s.auth.Password != "" && eq(user, s.auth.Username) && eq(pass, s.auth.Password)
}

// URL is the server's base URL, http://127.0.0.1:PORT.
func (s *Server) URL() string { return s.srv.URL }

// Root is the directory holding the served bare repositories.
func (s *Server) Root() string { return s.root }

// Requests is the number of HTTP requests served so far; Denied the number
// refused for missing or wrong credentials.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Denied is the number of requests refused for missing or wrong credentials.
func (s *Server) Denied() int64 { return s.denied.Load() }

// NewRepo creates an empty bare repository name.git that accepts pushes
// but refuses non-fast-forward updates, and returns its URL and directory.
func (s *Server) NewRepo(name string) (url, dir string) {
	s.t.Helper()
	dir = filepath.Join(s.root, name+".git")
	InitBare(s.t, dir)
	Git(s.t, dir, "config", "http.receivepack", "true")
	return s.srv.URL + "/" + name + ".git", dir
}

// InitBare creates a bare repository at dir that refuses non-fast-forward
// updates and deletions, as an evidence remote should.
func InitBare(t testing.TB, dir string) {
	t.Helper()
	Git(t, "", "init", "--quiet", "--bare", dir)
	Git(t, dir, "config", "receive.denyNonFastForwards", "true")
	Git(t, dir, "config", "receive.denyDeletes", "true")
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("git http-backend: %s", bytes.TrimSpace(p))
	return len(p), nil
}

// noHome is the HOME of every git a test runs: a path under a device
// file, where no directory can ever be made, so that no user's or other
// test's configuration is read and nothing is left behind (a temporary
// directory per test process was never removed).
const noHome = "/dev/null/gittest-home"

// isolatedEnv keeps the user's and system's git configuration out of tests.
func isolatedEnv() []string {
	return []string{
		"HOME=" + noHome,
		"XDG_CONFIG_HOME=" + noHome + "/.config",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=gittest", "GIT_AUTHOR_EMAIL=gittest@example.invalid",
		"GIT_COMMITTER_NAME=gittest", "GIT_COMMITTER_EMAIL=gittest@example.invalid",
		"LC_ALL=C",
	}
}

// Cmd returns a stock git command run in dir (the current directory when
// dir is empty) with the user's configuration kept out.
func Cmd(t testing.TB, dir string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(isolatedEnv(), "PATH="+os.Getenv("PATH"))
	return cmd
}

// Git runs stock git in dir, fails the test when it exits non-zero, and
// returns its standard output with surrounding space trimmed.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := Run(t, dir, nil, args...)
	require.NoError(t, err, "git %s", strings.Join(args, " "))
	return out
}

// Run runs stock git in dir with stdin and returns its trimmed standard
// output; on failure the error carries standard error.
func Run(t testing.TB, dir string, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := Cmd(t, dir, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return strings.TrimSpace(stdout.String()), &ExitError{Args: args, Stderr: stderr.String(), Err: err}
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ExitError is a git command that failed, with what it wrote to stderr.
type ExitError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *ExitError) Error() string {
	return "git " + strings.Join(e.Args, " ") + ": " + e.Err.Error() + ": " + strings.TrimSpace(e.Stderr)
}

func (e *ExitError) Unwrap() error { return e.Err }
