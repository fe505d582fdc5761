// Package faultproxy puts a misbehaving network between a Git client and
// a real smart-HTTP Git server (internal/testing/gittest) so that tests can show
// what signet does when the remote refuses connections, resets a
// connection in the middle of a pack, stalls without answering, or loses a
// compare-and-swap push to a competing writer. It speaks just enough
// HTTP/1.1 to see each request; every byte it forwards comes from the real
// server. It never rewrites a request or a response.
package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Kind is what the proxy does to the next connection or request.
type Kind int

const (
	// Healthy forwards every request and response untouched.
	Healthy Kind = iota
	// Refuse closes the listening socket: connecting fails with
	// "connection refused" until the proxy is healed (same address).
	Refuse
	// Reset forwards a smart-protocol POST (the request that carries or
	// returns a pack) and the first After bytes of its response, then
	// resets the connection (RST). Reference advertisements (GET) pass.
	Reset
	// Stall accepts connections and never answers (what the client sends
	// is read and dropped).
	// A stalled connection stays stalled when the proxy is healed, as a
	// black-holed TCP connection does; only Close ends it.
	Stall
	// Race runs the Race hook before forwarding each receive-pack POST, so
	// that another writer moves the branch between the client's reading
	// of the advertisement and its compare-and-swap update.
	Race
	// Swallow answers each receive-pack POST with "200 OK" and an empty
	// body without forwarding it, as a middlebox that eats the push does:
	// nothing lands, and no report says so.
	Swallow
	// Trickle forwards the response of each smart-protocol POST After
	// bytes at a time with Pause between, as a slow link does: the
	// transfer keeps moving, only slowly.
	Trickle
	// Hang forwards the first After bytes of each smart-protocol POST's
	// response (headers included), then sends nothing more and holds the
	// connection until Close, as a remote that dies mid-pack behind a
	// black hole does.
	Hang
)

func (k Kind) String() string {
	switch k {
	case Healthy:
		return "healthy"
	case Refuse:
		return "refuse"
	case Reset:
		return "reset"
	case Stall:
		return "stall"
	case Race:
		return "race"
	case Swallow:
		return "swallow"
	case Trickle:
		return "trickle"
	case Hang:
		return "hang"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is the proxy's behaviour from now on.
type Fault struct {
	Kind Kind
	// After is, for Reset and Hang, how many bytes of the response are
	// forwarded before the reset or the hang (headers included); for
	// Trickle, how many are forwarded at a time.
	After int64
	// Pause is, for Trickle, the wait between two forwarded pieces.
	Pause time.Duration
	// Race is, for Race, what runs before a receive-pack POST is
	// forwarded; an error is logged and the POST forwarded anyway.
	Race func() error
}

// Proxy is a TCP listener on 127.0.0.1 in front of an HTTP server.
type Proxy struct {
	t        testing.TB
	upstream string // host:port
	addr     string // our address, kept across Refuse

	mu     sync.Mutex
	fault  Fault
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	requests atomic.Int64
	faulted  atomic.Int64
}

// New starts a proxy in front of the server at target (an http:// URL of
// which only the host and port are used). It is closed when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		t.Fatalf("faultproxy: target %q is not an http URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	p := &Proxy{t: t, upstream: u.Host, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.Close)
	return p
}

// URL is the proxy's base URL, http://127.0.0.1:PORT: use it where the
// server's URL would go.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Requests is the number of HTTP requests the proxy has read so far.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Faulted is the number of connections or requests a fault was applied to.
func (p *Proxy) Faulted() int64 { return p.faulted.Load() }

// Set makes f the proxy's behaviour for every connection accepted and
// every request read from now on.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	old := p.fault.Kind
	p.fault = f
	switch {
	case f.Kind == Refuse && old != Refuse:
		_ = p.ln.Close()
		p.ln = nil
	case f.Kind != Refuse && old == Refuse:
		// Listen again on the same address (SO_REUSEADDR is Go's default).
		var ln net.Listener
		var err error
		for i := 0; i < 100; i++ {
			if ln, err = net.Listen("tcp", p.addr); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			p.t.Errorf("faultproxy: listen again on %s: %v", p.addr, err)
			return
		}
		p.ln = ln
		p.serve(ln)
	}
}

// Heal makes the proxy healthy again: new connections and requests are
// forwarded untouched.
func (p *Proxy) Heal() { p.Set(Fault{Kind: Healthy}) }

// Close stops the proxy and ends every connection, stalled ones included.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) current() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) serve(ln net.Listener) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.track(c) {
				_ = c.Close()
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.untrack(c)
				p.handle(c)
			}()
		}
	}()
}

// handle serves one client connection, one request at a time.
func (p *Proxy) handle(c net.Conn) {
	if p.current().Kind == Stall {
		p.faulted.Add(1)
		stallUntilClosed(c)
		return
	}
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		p.requests.Add(1)
		f := p.current()
		if f.Kind == Stall {
			p.faulted.Add(1)
			stallUntilClosed(c)
			return
		}
		if !p.forward(c, req, f) {
			return
		}
	}
}

// stallUntilClosed waits until the connection is closed (by Close) without
// answering. It may read the client's bytes and drops them.
func stallUntilClosed(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// isPOST reports whether req is a smart-protocol request carrying or
// returning a pack, and whether it is a push.
func isPOST(req *http.Request) (rpc, push bool) {
	if req.Method != http.MethodPost {
		return false, false
	}
	push = strings.HasSuffix(req.URL.Path, "/git-receive-pack")
	return push || strings.HasSuffix(req.URL.Path, "/git-upload-pack"), push
}

// forward sends req upstream on a fresh connection and copies the response
// back, applying f. It reports whether the client connection may carry
// another request.
func (p *Proxy) forward(c net.Conn, req *http.Request, f Fault) bool {
	rpc, push := isPOST(req)
	if f.Kind == Race && push && f.Race != nil {
		p.faulted.Add(1)
		if err := f.Race(); err != nil {
			p.t.Logf("faultproxy: competing push failed: %v", err)
		}
	}
	if f.Kind == Swallow && push {
		p.faulted.Add(1)
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-receive-pack-result\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return false
	}
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return false
	}
	defer up.Close()
	// One request per upstream connection: the server closes it after the
	// response, which ends the copy below.
	req.Close = true
	req.Header.Set("Connection", "close")
	if err := req.Write(up); err != nil {
		return false
	}
	var w io.Writer = c
	reset := f.Kind == Reset && rpc
	switch {
	case reset:
		p.faulted.Add(1)
		w = &limitWriter{w: c, n: f.After}
	case f.Kind == Trickle && rpc:
		p.faulted.Add(1)
		_ = trickle(c, up, f.After, f.Pause)
		return false
	case f.Kind == Hang && rpc:
		p.faulted.Add(1)
		_, _ = io.CopyN(c, up, f.After)
		stallUntilClosed(c)
		return false
	}
	_, err = io.Copy(w, up)
	if reset || err != nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close sends RST
		}
		return false
	}
	// The upstream said Connection: close; so does the response the
	// client read, and it will not send another request here.
	return false
}

// trickle copies src to dst n bytes at a time, waiting pause before each
// piece after the first.
func trickle(dst io.Writer, src io.Reader, n int64, pause time.Duration) error {
	for first := true; ; first = false {
		if !first {
			time.Sleep(pause)
		}
		if _, err := io.CopyN(dst, src, n); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// limitWriter writes at most n bytes, then fails.
type limitWriter struct {
	w io.Writer
	n int64
}

var errLimit = errors.New("faultproxy: reset after the byte limit")

func (l *limitWriter) Write(b []byte) (int, error) {
	if l.n <= 0 {
		return 0, errLimit
	}
	if int64(len(b)) > l.n {
		n, err := l.w.Write(b[:l.n])
		l.n -= int64(n)
		if err == nil {
			err = errLimit
		}
		return n, err
	}
	n, err := l.w.Write(b)
	l.n -= int64(n)
	return n, err
}
