package evidence

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/revlist"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/internal/testing/gittest"
)

// Benchmarks of the issue-4 figures. Reproduce with
//
//	go test -run '^$' -bench . -benchtime 20x ./evidence/
//
// Besides ns/op (wall clock), each reports cpu-ns/op: the CPU time of the
// timed part, this process and every process it waited for (git,
// receive-pack, the loopback server's git http-backend) together. On a
// shared machine wall clock mostly measures the neighbours; compare
// cpu-ns/op there.
//
// Every size is a branch already holding that many runs, all admitted on
// the same day (the worst case for the date-sharded layout), each run
// synthesized with its index entry and one small document. One operation
// appends one run: its index entry and 20 documents of 2 KB.

var benchSizes = []int{100, 10_000, 100_000}

const benchDocs, benchDocSize = 20, 2048

// baseRepos builds, once per top-level benchmark, a bare repository per
// size with git fast-import (the fastest way to a big tree), packed.
type baseRepos struct {
	dir  string
	mu   sync.Mutex
	repo map[int]string
}

func newBaseRepos(b *testing.B) *baseRepos {
	return &baseRepos{dir: b.TempDir(), repo: map[int]string{}}
}

func (r *baseRepos) get(b *testing.B, runs int) string {
	b.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if dir, ok := r.repo[runs]; ok {
		return dir
	}
	dir := filepath.Join(r.dir, fmt.Sprintf("base-%d.git", runs))
	gittest.InitBare(b, dir)
	var s bytes.Buffer
	msg := fmt.Sprintf("synthesized %d runs", runs)
	fmt.Fprintf(&s, "commit refs/heads/%s\ncommitter bench <bench@example.invalid> %d +0000\ndata %d\n%s\n", DefaultBranch, day.Unix(), len(msg), msg)
	for i := range runs {
		run := fmt.Sprintf("base-%06d", i)
		idx := IndexEntry("bench", run, day)
		doc := fmt.Sprintf(`{"run":%q}`, run)
		fmt.Fprintf(&s, "M 100644 inline %s\ndata %d\n%s\n", idx.Path, len(idx.Data), idx.Data)
		fmt.Fprintf(&s, "M 100644 inline %s/admission.json\ndata %d\n%s\n", RunDir("bench", run, day), len(doc), doc)
	}
	_, err := gittest.Run(b, dir, s.Bytes(), "fast-import", "--quiet")
	require.NoError(b, err)
	r.repo[runs] = dir
	return dir
}

// cpuNow is the CPU time, user and system, of this process and of every
// descendant it has waited for.
func cpuNow() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

// cpuMeter adds up the CPU time of the timed parts of a benchmark.
type cpuMeter struct{ t0, sum time.Duration }

func (m *cpuMeter) start() { m.t0 = cpuNow() }
func (m *cpuMeter) stop()  { m.sum += cpuNow() - m.t0 }
func (m *cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(m.sum.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// copyRepo copies a bare repository (a few pack files) to dst.
func copyRepo(b *testing.B, src, dst string) {
	b.Helper()
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	require.NoError(b, err, "%s", out)
}

// benchStore opens a Store on remote whose mirror already holds base, so
// that the benchmark does not measure the first fetch.
func benchStore(b *testing.B, base, remote string) *Store {
	b.Helper()
	signer, _ := testSigner(b)
	opts := testOptions(b, remote, signer)
	copyRepo(b, base, filepath.Join(opts.StateDir, mirrorDir))
	return openStore(b, opts)
}

var benchRun struct {
	sync.Mutex
	n int
}

// nextRun is a fresh run's files.
func nextRun() []File {
	benchRun.Lock()
	defer benchRun.Unlock()
	benchRun.n++
	return runFiles("bench", fmt.Sprintf("bench-%09d", benchRun.n), benchDocs, benchDocSize)
}

// BenchmarkAppend measures Store.Append of one run, whole: the tree
// rewrite, the signed commit, the compare-and-swap push of only the new
// objects to a bare repository on local disk,
// the mirror and the remembered tip (fsync). The "commit" variant stops
// before the push: the local work, comparable to git fast-import.
//
// The remote is written in process (gitobj's local push); the
// "receive-pack" variant gives the remote a no-op pre-receive hook, which
// sends the push through stock git-receive-pack as before.
func BenchmarkAppend(b *testing.B) {
	bases := newBaseRepos(b)
	for _, variant := range []string{"", "receive-pack/"} {
		for _, runs := range benchSizes {
			b.Run(fmt.Sprintf("%sruns=%d", variant, runs), func(b *testing.B) {
				benchmarkAppend(b, bases.get(b, runs), variant != "")
			})
		}
	}
	for _, runs := range benchSizes {
		b.Run(fmt.Sprintf("commit/runs=%d", runs), func(b *testing.B) {
			base := bases.get(b, runs)
			s := benchStore(b, base, base)
			var cpu cpuMeter
			step := func() {
				files := nextRun()
				cpu.start()
				defer cpu.stop()
				// As Append: the store lock keeps a background
				// consolidation from swapping packs under the build.
				s.mu.Lock()
				defer s.mu.Unlock()
				root, err := newChangeTree(files)
				require.NoError(b, err)
				bl := gitobj.NewBuilder(s.objs)
				c, err := bl.Commit(s.tip, root, "bench\n", s.signature(), s.signCommit)
				require.NoError(b, err)
				require.NoError(b, s.keep(bl))
				s.tip = c
			}
			step() // warm-up, as above
			cpu = cpuMeter{}
			b.ReportAllocs()
			for b.Loop() {
				step()
			}
			cpu.report(b)
		})
	}
}

// benchmarkAppend measures Store.Append on a copy of base; through
// stock receive-pack when receivePack is set.
func benchmarkAppend(b *testing.B, base string, receivePack bool) {
	remote := filepath.Join(b.TempDir(), "remote.git")
	copyRepo(b, base, remote)
	if receivePack {
		require.NoError(b, os.WriteFile(filepath.Join(remote, "hooks", "pre-receive"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	}
	s := benchStore(b, base, remote)
	// Warm up: the first read of a big pack builds go-git's
	// offset index once per process (about a second at 10^5 runs).
	_, err := s.Append(b.Context(), "warm-up", nextRun())
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	var cpu cpuMeter
	for b.Loop() {
		files := nextRun()
		cpu.start()
		_, err := s.Append(b.Context(), "bench", files)
		cpu.stop()
		require.NoError(b, err)
	}
	cpu.report(b)
}

// fastImportStream is the same append as a git fast-import stream.
func fastImportStream(files []File) []byte {
	var s bytes.Buffer
	msg := "bench"
	fmt.Fprintf(&s, "commit refs/heads/%s\ncommitter bench <bench@example.invalid> %d +0000\ndata %d\n%s\nfrom refs/heads/%s^0\n",
		DefaultBranch, time.Now().Unix(), len(msg), msg, DefaultBranch)
	for _, f := range files {
		fmt.Fprintf(&s, "M 100644 inline %s\ndata %d\n%s\n", f.Path, len(f.Data), f.Data)
	}
	return s.Bytes()
}

// BenchmarkFastImport is the same append done by stock git fast-import
// on a copy of the same repository: the stream is prepared beforehand,
// the process run is timed.
func BenchmarkFastImport(b *testing.B) {
	bases := newBaseRepos(b)
	for _, runs := range benchSizes {
		b.Run(fmt.Sprintf("runs=%d", runs), func(b *testing.B) {
			repo := filepath.Join(b.TempDir(), "repo.git")
			copyRepo(b, bases.get(b, runs), repo)
			var cpu cpuMeter
			for b.Loop() {
				b.StopTimer()
				stream := fastImportStream(nextRun())
				cmd := gittest.Cmd(b, repo, "fast-import", "--quiet")
				cmd.Stdin = bytes.NewReader(stream)
				b.StartTimer()
				cpu.start()
				out, err := cmd.CombinedOutput()
				cpu.stop()
				require.NoError(b, err, "%s", out)
			}
			cpu.report(b)
		})
	}
}

// BenchmarkPush measures pushing one appended run to the loopback
// smart-HTTP server (git http-backend): signet's compare-and-swap push of
// the objects it created, stock `git push` of the same kind of commit, and
// go-git's Remote.Push (go-git issue #1102: it walks every object
// reachable from the remote's refs). Building the commit is not timed.
func BenchmarkPush(b *testing.B) {
	bases := newBaseRepos(b)
	for _, runs := range benchSizes {
		b.Run(fmt.Sprintf("signet/runs=%d", runs), func(b *testing.B) {
			base := bases.get(b, runs)
			url := seedHTTP(b, base)
			s := benchStore(b, base, url)
			var cpu cpuMeter
			for b.Loop() {
				b.StopTimer()
				root, err := newChangeTree(nextRun())
				require.NoError(b, err)
				bl := gitobj.NewBuilder(s.objs)
				c, err := bl.Commit(s.tip, root, "bench\n", s.signature(), s.signCommit)
				require.NoError(b, err)
				b.StartTimer()
				cpu.start()
				require.NoError(b, s.remote.Push(b.Context(), bl.Objects(), s.ref, s.tip, c, bl.Hashes()))
				cpu.stop()
				b.StopTimer()
				require.NoError(b, s.keep(bl))
				require.NoError(b, s.setTip(b.Context(), c, true))
				b.StartTimer()
			}
			cpu.report(b)
		})
		b.Run(fmt.Sprintf("git/runs=%d", runs), func(b *testing.B) {
			base := bases.get(b, runs)
			url := seedHTTP(b, base)
			local := filepath.Join(b.TempDir(), "local.git")
			copyRepo(b, base, local)
			var cpu cpuMeter
			for b.Loop() {
				b.StopTimer()
				_, err := gittest.Run(b, local, fastImportStream(nextRun()), "fast-import", "--quiet")
				require.NoError(b, err)
				push := gittest.Cmd(b, local, "push", "--quiet", url, DefaultBranch)
				b.StartTimer()
				cpu.start()
				out, err := push.CombinedOutput()
				cpu.stop()
				require.NoError(b, err, "%s", out)
			}
			cpu.report(b)
		})
		b.Run(fmt.Sprintf("go-git/runs=%d", runs), func(b *testing.B) {
			base := bases.get(b, runs)
			url := seedHTTP(b, base)
			s := benchStore(b, base, base) // only its mirror and builder
			repo, err := git.Open(s.st, nil)
			require.NoError(b, err)
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{url}})
			require.NoError(b, err)
			spec := config.RefSpec(fmt.Sprintf("%s:%s", s.ref, s.ref))
			var cpu cpuMeter
			for b.Loop() {
				b.StopTimer()
				root, err := newChangeTree(nextRun())
				require.NoError(b, err)
				bl := gitobj.NewBuilder(s.objs)
				c, err := bl.Commit(s.tip, root, "bench\n", s.signature(), s.signCommit)
				require.NoError(b, err)
				require.NoError(b, bl.Persist(s.st))
				require.NoError(b, s.st.SetReference(plumbing.NewHashReference(s.ref, c)))
				s.tip = c
				b.StartTimer()
				ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
				cpu.start()
				err = repo.PushContext(ctx, &git.PushOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{spec}})
				cpu.stop()
				cancel()
				require.NoError(b, err)
			}
			cpu.report(b)
		})
	}
}

// BenchmarkRevlist isolates what go-git's Remote.Push computes before it
// sends anything (go-git issue #1102): revlist.Objects from the new
// commit, excluding everything reachable from the remote's tip. Its cost
// grows with the branch; signet's push skips it, sending the objects the
// append created.
func BenchmarkRevlist(b *testing.B) {
	bases := newBaseRepos(b)
	for _, runs := range benchSizes {
		b.Run(fmt.Sprintf("runs=%d", runs), func(b *testing.B) {
			base := bases.get(b, runs)
			s := benchStore(b, base, base)
			old := s.tip
			root, err := newChangeTree(nextRun())
			require.NoError(b, err)
			bl := gitobj.NewBuilder(s.objs)
			c, err := bl.Commit(old, root, "bench\n", s.signature(), s.signCommit)
			require.NoError(b, err)
			require.NoError(b, bl.Persist(s.st))
			for b.Loop() {
				hs, err := revlist.Objects(s.st, []plumbing.Hash{c}, []plumbing.Hash{old})
				require.NoError(b, err)
				require.Len(b, hs, len(bl.Hashes()))
			}
		})
	}
}

// seedHTTP serves a copy of base on a new loopback smart-HTTP server.
func seedHTTP(b *testing.B, base string) string {
	b.Helper()
	srv := gittest.NewHTTPServer(b)
	url, dir := srv.NewRepo("evidence")
	require.NoError(b, os.RemoveAll(dir))
	copyRepo(b, base, dir)
	gittest.Git(b, dir, "config", "http.receivepack", "true")
	require.True(b, strings.HasSuffix(url, ".git"))
	return url
}

// BenchmarkConcurrentWriters is issue 19's many clusters on one evidence
// branch: W stores (one per cluster, as W reconcilers would be) append to
// one remote over the loopback smart-HTTP server at once, each b.N runs of
// benchDocs documents. appends/s is the aggregate; the goal is
// writers=4 at ≥ 0.8× writers=1. Every append must land (a lost race is
// retried inside Append).
func BenchmarkConcurrentWriters(b *testing.B) {
	for _, writers := range []int{1, 4} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			srv := gittest.NewHTTPServer(b)
			url, dir := srv.NewRepo("evidence")
			signer, _ := testSigner(b)
			stores := make([]*Store, writers)
			for i := range stores {
				stores[i] = openStore(b, testOptions(b, url, signer))
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			for w, s := range stores {
				wg.Go(func() {
					for i := range b.N {
						_, err := s.Append(b.Context(), "bench", runFiles(fmt.Sprintf("c%d", w), fmt.Sprintf("r%09d", i), benchDocs, benchDocSize))
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(writers*b.N)/b.Elapsed().Seconds(), "appends/s")
			require.Equal(b, fmt.Sprint(writers*b.N), gittest.Git(b, dir, "rev-list", "--count", DefaultBranch), "an append was lost or duplicated")
		})
	}
}

// BenchmarkGroupCommit: callers appending to one store at once (a
// reconciler's concurrent runs), each append a run's 20 documents, to a
// bare repository on local disk (written in process). With one caller
// every append is its own commit and push; with several, the appends that
// wait while one is written are written together (group commit).
// Reports appends/s and appends per commit.
func BenchmarkGroupCommit(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			remote := bareRemote(b)
			signer, _ := testSigner(b)
			s := openStore(b, testOptions(b, remote, signer))
			b.ResetTimer()
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for range b.N {
						if _, err := s.Append(b.Context(), "bench", nextRun()); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			commits, err := strconv.Atoi(gittest.Git(b, remote, "rev-list", "--count", DefaultBranch))
			require.NoError(b, err)
			files := strings.Count(gittest.Git(b, remote, "ls-tree", "-r", "--name-only", DefaultBranch), "\n") + 1
			require.Equal(b, callers*b.N*(benchDocs+1), files, "an append was lost or duplicated")
			b.ReportMetric(float64(callers*b.N)/b.Elapsed().Seconds(), "appends/s")
			b.ReportMetric(float64(callers*b.N)/float64(commits), "appends/commit")
		})
	}
}
