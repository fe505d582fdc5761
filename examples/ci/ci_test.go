// Package ci_test runs the CI examples' shell steps verbatim.
package ci_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/testenv"
)

// runnerDir is every job's RUNNER_TEMP and CI_BUILDS_DIR: the jobs build
// signet in the same place each time, so that the Go build cache serves
// every build after the first (a package's directory is part of its cache
// key). Jobs run one at a time.
var runnerDir string

func TestMain(m *testing.M) {
	var err error
	if runnerDir, err = os.MkdirTemp("", "signet-ci-runner-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(runnerDir)
	testenv.Cleanup()
	os.Exit(code)
}

// prCase is one pull request on the fixture spec repository and what the
// CI job must conclude.
type prCase struct {
	name string
	// change edits the PR branch's working tree of repo.
	change func(repo *testenv.Repo)
	pass   bool
	// want is in the job's output.
	want []string
}

var prCases = []prCase{
	{"clean", func(r *testenv.Repo) { r.WriteFile("README.md", "the fleet's specs\n") }, true, []string{"every change is approved"}},
	{"breaks a digest", func(r *testenv.Repo) {
		r.WriteFile("bundles/burnin/burn.sh", "#!/bin/sh\necho tampered\n")
	}, false, []string{"the specs have findings"}},
	{"invalidates an approval", func(r *testenv.Repo) {
		r.AddRequestFor("batch-1", "burnin", []string{"gpu-2"})
	}, false, []string{"changes need approval"}},
}

// fixture is a spec repository whose main branch holds an approved
// profile and request, a clone of it checked out at the PR branch (as CI
// checks it out), and the trust policy's file URL and sha256.
type fixture struct {
	workspace, trustURL, trustSHA string
}

func newFixture(t *testing.T, c prCase) *fixture {
	t.Helper()
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("burnin", "", testenv.Check{Name: "burn", Script: "result Pass; exit 0"})
	repo.AddRequestFor("batch-1", "burnin", []string{"gpu-1"})
	repo.Commit("specs")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/burnin", "CertificationRequest/batch-1")
	gittest.Git(t, repo.Dir, "checkout", "-q", "-b", "pr")
	c.change(repo)
	repo.Commit("the PR: " + c.name)
	gittest.Git(t, repo.Dir, "checkout", "-q", "main")

	ws := filepath.Join(t.TempDir(), "workspace")
	gittest.Git(t, filepath.Dir(ws), "clone", "-q", repo.Dir, ws)
	gittest.Git(t, ws, "checkout", "-q", "pr")
	b, err := os.ReadFile(keys.TrustFile)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return &fixture{workspace: ws, trustURL: "file://" + keys.TrustFile, trustSHA: hex.EncodeToString(sum[:])}
}

// signetSource is the pinned source the jobs build: this repository at its
// HEAD commit.
func signetSource(t *testing.T) (gitURL, commit string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	return root, gittest.Git(t, root, "rev-parse", "HEAD")
}

// baseEnv is the environment every CI shell gets: this process's, less
// anything that would let a step find another signet.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SIGNET_") {
			env = append(env, kv)
		}
	}
	return env
}

var expression = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)

type job struct {
	Env   map[string]string `json:"env"`
	Steps []struct {
		Name            string            `json:"name"`
		Uses            string            `json:"uses"`
		Run             string            `json:"run"`
		Env             map[string]string `json:"env"`
		ContinueOnError bool              `json:"continue-on-error"`
	} `json:"steps"`
}

// gitHubJob reads the job signet of examples/ci/spec-pr.yaml.
func gitHubJob(t *testing.T) job {
	t.Helper()
	b, err := os.ReadFile("spec-pr.yaml")
	require.NoError(t, err)
	var wf struct {
		Jobs map[string]job `json:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &wf))
	j, ok := wf.Jobs["signet"]
	require.True(t, ok, "spec-pr.yaml has no job signet")
	// The source is the repository variables', never a placeholder.
	require.Equal(t, "${{ vars.SIGNET_GIT }}", j.Env["SIGNET_GIT"])
	require.Equal(t, "${{ vars.SIGNET_COMMIT }}", j.Env["SIGNET_COMMIT"])
	return j
}

// runGitHubJob runs every `run:` step of j verbatim in workspace, as
// GitHub's runner does (bash -eo pipefail, $GITHUB_PATH,
// $GITHUB_STEP_SUMMARY, continue-on-error; the checkout and setup-go steps
// are what the test arranges), with vars as the repository variables
// (GitHub gives an unset one as ""). It returns the output, the step that
// failed the job ("" when none did) and the job summary.
func runGitHubJob(t *testing.T, j job, vars map[string]string, workspace, runner string) (string, string, string) {
	t.Helper()
	tmp := t.TempDir()
	files := map[string]string{}
	for _, k := range []string{"GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT"} {
		files[k] = filepath.Join(tmp, strings.ToLower(k))
		require.NoError(t, os.WriteFile(files[k], nil, 0o600))
	}
	var out strings.Builder
	failed := ""
	for _, st := range j.Steps {
		if st.Run == "" {
			continue
		}
		env := append(baseEnv(), "RUNNER_TEMP="+runner, "GITHUB_BASE_REF=main", "CI=true")
		for k, p := range files {
			env = append(env, k+"="+p)
		}
		for _, m := range []map[string]string{j.Env, st.Env} {
			for k, v := range m {
				v = expression.ReplaceAllStringFunc(v, func(e string) string {
					name := expression.FindStringSubmatch(e)[1]
					val, ok := vars[name]
					require.True(t, ok, "step %q: expression %s is not one the test provides", st.Name, e)
					return val
				})
				env = append(env, k+"="+v)
			}
		}
		require.NotRegexp(t, expression, st.Run, "step %q: run: must use environment variables only", st.Name)
		paths, err := os.ReadFile(files["GITHUB_PATH"])
		require.NoError(t, err)
		path := os.Getenv("PATH")
		for _, p := range strings.Fields(string(paths)) {
			path = p + ":" + path
		}
		env = append(env, "PATH="+path)
		script := filepath.Join(tmp, "step.sh")
		require.NoError(t, os.WriteFile(script, []byte(st.Run), 0o600))
		cmd := exec.CommandContext(t.Context(), "bash", "--noprofile", "--norc", "-eo", "pipefail", script)
		cmd.Dir, cmd.Env = workspace, env
		o, err := cmd.CombinedOutput()
		out.WriteString("## step " + st.Name + "\n" + string(o))
		if err != nil && !st.ContinueOnError {
			failed = st.Name
			out.WriteString("## job failed at step " + st.Name + "\n")
			break
		}
	}
	summary, err := os.ReadFile(files["GITHUB_STEP_SUMMARY"])
	require.NoError(t, err)
	return out.String(), failed, string(summary)
}

// TestGitHubWorkflow runs the steps of examples/ci/spec-pr.yaml verbatim
// (runGitHubJob) for each PR of prCases, with the repository variables
// pointing at the fixture's trust policy and SIGNET_GIT/SIGNET_COMMIT at
// this repository's HEAD.
func TestGitHubWorkflow(t *testing.T) {
	j := gitHubJob(t)
	src, commit := signetSource(t)
	for _, c := range prCases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c)
			vars := map[string]string{
				"vars.SIGNET_TRUST_POLICY_URL": f.trustURL, "vars.SIGNET_TRUST_POLICY_SHA256": f.trustSHA,
				"vars.SIGNET_GIT": src, "vars.SIGNET_COMMIT": commit,
			}
			out, failed, summary := runGitHubJob(t, j, vars, f.workspace, runnerDir)
			if failed != "" {
				require.Equal(t, "Gate", failed, "only the gate may fail the job:\n%s", out)
			}
			assert.Equal(t, c.pass, failed == "", "job result:\n%s", out)
			for _, w := range c.want {
				assert.Contains(t, out, w)
			}
			assert.Contains(t, summary, "### signet diff")
			if c.name == "breaks a digest" {
				assert.Contains(t, out, "::error file=", "validate annotates the PR")
			}
		})
	}
}

// unpinnedCases are source variables the jobs must refuse before fetching
// anything: the variable to set is named, and no signet is built.
var unpinnedCases = []struct {
	name, git, commit, want string
}{
	{"SIGNET_GIT unset", "", "HEAD", "variable SIGNET_GIT is not set"},
	{"SIGNET_COMMIT unset", "SRC", "", `variable SIGNET_COMMIT is "": set it to the full commit hash`},
	{"SIGNET_COMMIT a branch", "SRC", "main", `variable SIGNET_COMMIT is "main": set it to the full commit hash`},
	{"SIGNET_COMMIT abbreviated", "SRC", "SHORT", `variable SIGNET_COMMIT is "`},
}

// unpinnedSource is c's SIGNET_GIT and SIGNET_COMMIT: SRC is this
// repository, HEAD its commit, SHORT its first 12 hex digits.
func unpinnedSource(t *testing.T, git, commit string) (string, string) {
	src, head := signetSource(t)
	switch git {
	case "SRC":
		git = src
	}
	switch commit {
	case "HEAD":
		commit = head
	case "SHORT":
		commit = head[:12]
	}
	return git, commit
}

// TestGitHubWorkflowUnpinned: with SIGNET_GIT or SIGNET_COMMIT unset, or a
// commit that is not a full hash, the build step fails naming the variable
// and builds nothing.
func TestGitHubWorkflowUnpinned(t *testing.T) {
	j := gitHubJob(t)
	for _, c := range unpinnedCases {
		t.Run(c.name, func(t *testing.T) {
			git, commit := unpinnedSource(t, c.git, c.commit)
			runner := t.TempDir()
			vars := map[string]string{
				"vars.SIGNET_TRUST_POLICY_URL": "", "vars.SIGNET_TRUST_POLICY_SHA256": "",
				"vars.SIGNET_GIT": git, "vars.SIGNET_COMMIT": commit,
			}
			out, failed, _ := runGitHubJob(t, j, vars, t.TempDir(), runner)
			assert.Equal(t, "Build signet from its pinned source", failed, out)
			assert.Contains(t, out, "::error::repository "+c.want)
			assert.NoDirExists(t, filepath.Join(runner, "signet-src"), "nothing was fetched")
			assert.NoFileExists(t, filepath.Join(runner, "bin", "signet"), "nothing was built")
		})
	}
}

type gitLabJob struct {
	Variables map[string]string `json:"variables"`
	Script    []string          `json:"script"`
}

// readGitLabJob reads the job signet of examples/ci/gitlab-ci.yml.
func readGitLabJob(t *testing.T) gitLabJob {
	t.Helper()
	b, err := os.ReadFile("gitlab-ci.yml")
	require.NoError(t, err)
	var jobs map[string]gitLabJob
	require.NoError(t, yaml.Unmarshal(b, &jobs))
	j, ok := jobs["signet"]
	require.True(t, ok, "gitlab-ci.yml has no job signet")
	require.NotEmpty(t, j.Script)
	// The source is the CI/CD variables' (which take precedence over the
	// job's), never a placeholder in the job.
	require.NotContains(t, j.Variables, "SIGNET_GIT")
	require.NotContains(t, j.Variables, "SIGNET_COMMIT")
	return j
}

// runGitLabJob runs the script of j verbatim in workspace, as GitLab's
// runner does (one bash -eo pipefail shell, the job's variables and the
// CI/CD variables vars, CI_MERGE_REQUEST_TARGET_BRANCH_NAME,
// CI_BUILDS_DIR), and returns its output and error.
func runGitLabJob(t *testing.T, j gitLabJob, vars map[string]string, workspace, builds string) (string, error) {
	t.Helper()
	env := append(baseEnv(), "CI_BUILDS_DIR="+builds, "CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main", "CI_PIPELINE_SOURCE=merge_request_event")
	for k, v := range j.Variables {
		env = append(env, k+"="+v)
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	cmd := exec.CommandContext(t.Context(), "bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", strings.Join(j.Script, "\n"))
	cmd.Dir, cmd.Env = workspace, env
	o, err := cmd.CombinedOutput()
	return string(o), err
}

// TestGitLabJob runs the script of examples/ci/gitlab-ci.yml verbatim
// (runGitLabJob) for each PR of prCases, its CI/CD variables pointing at
// the fixture's trust policy and at this repository's HEAD.
func TestGitLabJob(t *testing.T) {
	j := readGitLabJob(t)
	src, commit := signetSource(t)
	for _, c := range prCases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c)
			o, err := runGitLabJob(t, j, map[string]string{
				"SIGNET_TRUST_POLICY_URL": f.trustURL, "SIGNET_TRUST_POLICY_SHA256": f.trustSHA,
				"SIGNET_GIT": src, "SIGNET_COMMIT": commit,
			}, f.workspace, runnerDir)
			assert.Equal(t, c.pass, err == nil, "job result (%v):\n%s", err, o)
			for _, w := range c.want {
				assert.Contains(t, o, w)
			}
		})
	}
}

// TestGitLabJobUnpinned: as TestGitHubWorkflowUnpinned, for the GitLab
// job (an unset CI/CD variable is absent from the environment).
func TestGitLabJobUnpinned(t *testing.T) {
	j := readGitLabJob(t)
	for _, c := range unpinnedCases {
		t.Run(c.name, func(t *testing.T) {
			git, commit := unpinnedSource(t, c.git, c.commit)
			vars := map[string]string{}
			if git != "" {
				vars["SIGNET_GIT"] = git
			}
			if commit != "" {
				vars["SIGNET_COMMIT"] = commit
			}
			builds := t.TempDir()
			o, err := runGitLabJob(t, j, vars, t.TempDir(), builds)
			require.Error(t, err, o)
			assert.Contains(t, o, "CI/CD "+c.want)
			assert.NoDirExists(t, filepath.Join(builds, "signet-src"), "nothing was fetched")
			assert.NoFileExists(t, filepath.Join(builds, "bin", "signet"), "nothing was built")
		})
	}
}
