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

type workflow struct {
	Jobs map[string]struct {
		Env   map[string]string `json:"env"`
		Steps []struct {
			Name            string            `json:"name"`
			Uses            string            `json:"uses"`
			Run             string            `json:"run"`
			Env             map[string]string `json:"env"`
			ContinueOnError bool              `json:"continue-on-error"`
		} `json:"steps"`
	} `json:"jobs"`
}

var expression = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)

// TestGitHubWorkflow runs every `run:` step of examples/ci/spec-pr.yaml
// verbatim, as GitHub's runner does (bash -eo pipefail, $GITHUB_PATH,
// $GITHUB_STEP_SUMMARY, continue-on-error; the checkout and setup-go
// steps are what the test arranges), with its repository variables
// pointing at the fixture's trust policy and SIGNET_GIT/SIGNET_COMMIT at
// this repository's HEAD.
func TestGitHubWorkflow(t *testing.T) {
	b, err := os.ReadFile("spec-pr.yaml")
	require.NoError(t, err)
	var wf workflow
	require.NoError(t, yaml.Unmarshal(b, &wf))
	job, ok := wf.Jobs["signet"]
	require.True(t, ok, "spec-pr.yaml has no job signet")
	require.Contains(t, job.Env, "SIGNET_GIT")
	require.Contains(t, job.Env, "SIGNET_COMMIT")
	src, commit := signetSource(t)

	for _, c := range prCases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c)
			tmp := t.TempDir()
			files := map[string]string{}
			for _, k := range []string{"GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT"} {
				files[k] = filepath.Join(tmp, strings.ToLower(k))
				require.NoError(t, os.WriteFile(files[k], nil, 0o600))
			}
			runner := runnerDir
			vars := map[string]string{"vars.SIGNET_TRUST_POLICY_URL": f.trustURL, "vars.SIGNET_TRUST_POLICY_SHA256": f.trustSHA}
			jobEnv := map[string]string{}
			for k, v := range job.Env {
				jobEnv[k] = v
			}
			jobEnv["SIGNET_GIT"], jobEnv["SIGNET_COMMIT"] = src, commit

			var out strings.Builder
			failed := false
			for i, st := range job.Steps {
				if st.Run == "" {
					continue
				}
				env := append(baseEnv(), "RUNNER_TEMP="+runner, "GITHUB_BASE_REF=main", "CI=true")
				for k, p := range files {
					env = append(env, k+"="+p)
				}
				for _, m := range []map[string]string{jobEnv, st.Env} {
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
				cmd.Dir, cmd.Env = f.workspace, env
				o, err := cmd.CombinedOutput()
				out.WriteString("## step " + st.Name + "\n" + string(o))
				if err != nil && !st.ContinueOnError {
					failed = true
					out.WriteString("## job failed at step " + st.Name + "\n")
					require.Equal(t, len(job.Steps)-1, i, "only the gate may fail the job:\n%s", out.String())
					break
				}
			}
			assert.Equal(t, c.pass, !failed, "job result:\n%s", out.String())
			for _, w := range c.want {
				assert.Contains(t, out.String(), w)
			}
			summary, err := os.ReadFile(files["GITHUB_STEP_SUMMARY"])
			require.NoError(t, err)
			assert.Contains(t, string(summary), "### signet diff")
			if c.name == "breaks a digest" {
				assert.Contains(t, out.String(), "::error file=", "validate annotates the PR")
			}
		})
	}
}

// TestGitLabJob runs the script of examples/ci/gitlab-ci.yml verbatim, as
// GitLab's runner does (one bash -eo pipefail shell, the job's variables,
// CI_MERGE_REQUEST_TARGET_BRANCH_NAME, CI_BUILDS_DIR).
func TestGitLabJob(t *testing.T) {
	b, err := os.ReadFile("gitlab-ci.yml")
	require.NoError(t, err)
	var jobs map[string]struct {
		Variables map[string]string `json:"variables"`
		Script    []string          `json:"script"`
	}
	require.NoError(t, yaml.Unmarshal(b, &jobs))
	job, ok := jobs["signet"]
	require.True(t, ok, "gitlab-ci.yml has no job signet")
	require.NotEmpty(t, job.Script)
	src, commit := signetSource(t)

	for _, c := range prCases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c)
			env := append(baseEnv(), "CI_BUILDS_DIR="+runnerDir, "CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main", "CI_PIPELINE_SOURCE=merge_request_event",
				"SIGNET_TRUST_POLICY_URL="+f.trustURL, "SIGNET_TRUST_POLICY_SHA256="+f.trustSHA)
			for k, v := range job.Variables {
				switch k {
				case "SIGNET_GIT":
					v = src
				case "SIGNET_COMMIT":
					v = commit
				}
				env = append(env, k+"="+v)
			}
			cmd := exec.CommandContext(t.Context(), "bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", strings.Join(job.Script, "\n"))
			cmd.Dir, cmd.Env = f.workspace, env
			o, err := cmd.CombinedOutput()
			assert.Equal(t, c.pass, err == nil, "job result (%v):\n%s", err, o)
			for _, w := range c.want {
				assert.Contains(t, string(o), w)
			}
		})
	}
}
