package mutate

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// binaries holds the unmutated test binaries that baselines run, one per
// package and race setting, each built once: a baseline then costs the
// test's run, not a link of its package's test binary.
type binaries struct {
	dir   string // created on first use
	n     int    // binaries named so far
	byKey map[binKey]*testBinary
	// users counts, per binary, the mutations RunAll has still to run; the
	// binary is removed when it drops to zero. Nil outside RunAll.
	users map[binKey]int
}

type binKey struct {
	pkg  string
	race bool
}

func keyOf(t Test) binKey { return binKey{pkg: t.Pkg, race: t.Race} }

// testBinary is one package's unmutated test binary, usable once done is
// closed.
type testBinary struct {
	done chan struct{}
	// path is the binary; empty when go test -c built none, and then
	// build holds its output (a build failure, or no test files).
	path  string
	build TestRun
	pkg   pkgInfo
	err   error
}

// pkgInfo is what running a package's test binary as go test does needs.
type pkgInfo struct {
	// listed is go list's run; when it failed, the rest is empty.
	listed TestRun
	// dir is the package's directory, where go test runs its binary;
	// goroot is the go command's GOROOT, whose bin go test puts first on
	// PATH.
	dir, goroot string
}

// pkgInfo lists pkg once.
func (r *Runner) pkgInfo(ctx context.Context, pkg string) (pkgInfo, error) {
	r.mu.Lock()
	info, ok := r.pkgs[pkg]
	r.mu.Unlock()
	if ok {
		return info, nil
	}
	info.listed, _ = r.command(ctx, "go list", r.Root, nil, r.goCmd(), "list", "-f", "{{.Dir}}\n{{context.GOROOT}}", pkg)
	if err := ctx.Err(); err != nil {
		return info, err
	}
	if !info.listed.Passed {
		info.listed.BuildFailed = true
		return info, nil
	}
	// The run's output holds stderr too: the module downloads a fresh
	// cache reports come first, go list's two lines last.
	lines := strings.Split(strings.TrimSpace(info.listed.Output), "\n")
	if n := len(lines); n > 2 {
		lines = lines[n-2:]
	}
	if len(lines) != 2 || !filepath.IsAbs(lines[0]) || !filepath.IsAbs(lines[1]) {
		return info, fmt.Errorf("go list %s: want its directory and GOROOT, got %q", pkg, info.listed.Output)
	}
	info.dir, info.goroot = lines[0], lines[1]
	r.mu.Lock()
	if r.pkgs == nil {
		r.pkgs = map[string]pkgInfo{}
	}
	r.pkgs[pkg] = info
	r.mu.Unlock()
	return info, nil
}

// buildTest builds t's package's test binary at path with go test -c, with
// env added to the go command's environment. ok is false when there is no
// binary: run then says why (BuildFailed set, or no test files).
//
// Linking is most of a mutation's time, so the link is made cheaper in
// ways the tests cannot observe:
//   - -s -w, as go test links the binaries it runs (go test -c would keep
//     the debug information, which doubles the link);
//   - -linkmode=internal: kustomize imports package plugin, which makes
//     the linker hand every test binary that holds it to the host linker
//     (gcc), for 40% of the link; no test loads a plugin;
//   - GOGC=400 for the go command, compiler and linker unless GOGC is
//     set: about a fifth less CPU time, for some more memory. The test
//     binary does not inherit it.
func (r *Runner) buildTest(ctx context.Context, t Test, path string, env []string) (run TestRun, ok bool, err error) {
	args := []string{"test", "-c", "-vet=off", "-ldflags=-s -w -linkmode=internal", "-o", path}
	if t.Race {
		args = append(args, "-race")
	}
	env = append(os.Environ(), env...)
	if os.Getenv("GOGC") == "" {
		env = append(env, "GOGC=400")
	}
	run, err = r.command(ctx, "go test -c", r.Root, env, r.goCmd(), append(args, t.Pkg)...)
	switch {
	case err != nil:
		return run, false, err
	case !run.Passed:
		run.BuildFailed = true
		return run, false, nil
	}
	if _, err := os.Stat(path); err != nil {
		// Built nothing: the package has no test files.
		return TestRun{Output: run.Output + "\nno test files", Passed: true}, false, nil
	}
	return run, true, nil
}

// runBinary runs t from the test binary bin as go test runs it: in the
// package's directory, with the go command's GOROOT/bin first on PATH, and
// env added to the environment.
func (r *Runner) runBinary(ctx context.Context, t Test, pkg pkgInfo, bin string, env []string) (TestRun, error) {
	env = append(os.Environ(), env...)
	env = append(env, "PWD="+pkg.dir, "PATH="+filepath.Join(pkg.goroot, "bin")+string(filepath.ListSeparator)+os.Getenv("PATH"))
	args := []string{"-test.paniconexit0", "-test.timeout=" + r.timeout().String(), "-test.run=" + t.Run}
	return r.command(ctx, "go test", pkg.dir, env, bin, args...)
}

// baselineTest runs t from its package's unmutated test binary.
func (r *Runner) baselineTest(ctx context.Context, t Test) (TestRun, error) {
	b := r.testBinary(ctx, t)
	if b.err != nil || b.path == "" {
		return b.build, b.err
	}
	return r.runBinary(ctx, t, b.pkg, b.path, nil)
}

// testBinary returns t's package's unmutated test binary, building it on
// first use; a caller asking while it is built waits for it.
func (r *Runner) testBinary(ctx context.Context, t Test) *testBinary {
	k := keyOf(t)
	r.mu.Lock()
	b, ok := r.bins.byKey[k]
	var path string
	if !ok {
		b = &testBinary{done: make(chan struct{})}
		if r.bins.byKey == nil {
			r.bins.byKey = map[binKey]*testBinary{}
		}
		r.bins.byKey[k] = b
		if r.bins.dir == "" {
			r.bins.dir, b.err = os.MkdirTemp("", "mutate-bin-")
		}
		r.bins.n++
		path = filepath.Join(r.bins.dir, fmt.Sprintf("%d.test", r.bins.n))
	}
	r.mu.Unlock()
	if ok {
		select {
		case <-b.done:
			return b
		case <-ctx.Done():
			return &testBinary{err: ctx.Err()}
		}
	}
	defer close(b.done)
	if b.err == nil {
		b.pkg, b.err = r.pkgInfo(ctx, t.Pkg)
	}
	switch {
	case b.err != nil:
	case !b.pkg.listed.Passed:
		b.build = b.pkg.listed
	default:
		var built bool
		b.build, built, b.err = r.buildTest(ctx, t, path, nil)
		if built {
			b.path = path
		}
	}
	if b.err != nil {
		// Not built: a later call tries again.
		r.mu.Lock()
		delete(r.bins.byKey, k)
		r.mu.Unlock()
	}
	return b
}

// seedBinary copies t's package's unmutated test binary, when there is one
// already, to path.
func (r *Runner) seedBinary(t Test, path string) error {
	r.mu.Lock()
	b, ok := r.bins.byKey[keyOf(t)]
	r.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-b.done:
	default:
		return nil
	}
	if b.path == "" {
		return nil
	}
	src, err := os.Open(b.path)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// releaseBinary tells that a mutation of t is done, and removes t's test
// binary when it was the last one RunAll had to run.
func (r *Runner) releaseBinary(t Test) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := keyOf(t)
	if r.bins.users == nil {
		return
	}
	r.bins.users[k]--
	if b, ok := r.bins.byKey[k]; ok && r.bins.users[k] <= 0 {
		select {
		case <-b.done:
			if b.path != "" {
				_ = os.Remove(b.path)
			}
			delete(r.bins.byKey, k)
		default:
		}
	}
}

// Close removes the test binaries the baselines ran.
func (r *Runner) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	dir := r.bins.dir
	r.bins = binaries{}
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}
