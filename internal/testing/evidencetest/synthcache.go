package evidencetest

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"signet.dev/signet/signing"
)

// synthSources are the generator's own sources: their bytes are part of
// the cache's content stamp, so a changed generator never reuses a
// branch the old one wrote.
//
//go:embed synth.go synthcache.go
var synthSources embed.FS

// synthMeta is what a cached synthetic branch keeps beside its
// repository (keys and trust policy are files next to it).
type synthMeta struct {
	Runs      int `json:"runs"`
	Documents int `json:"documents"`
}

// SynthesizeCached is Synthesize of runs runs of checks checks, kept
// under the system temporary directory (signet-synth-<stamp>, the stamp
// a digest of the generator's sources and the sizes) and reused by later
// calls: a benchmark at 10^4 runs pays for the branch once. The branch
// is written where fsync costs nothing when the machine has one
// (/dev/shm; the writer's own mirror on disk), then cloned (one pack)
// into the cache, which appears whole (a temporary directory renamed in)
// or not at all. The returned
// Remote is shared: clone it before moving its branch. Remove the
// directory to write it again.
func SynthesizeCached(ctx context.Context, runs, checks int) (*Synthetic, error) {
	stamp, err := synthStamp(runs, checks)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(os.TempDir(), "signet-synth-"+stamp)
	if s, err := loadSynthetic(dir); err == nil {
		return s, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("evidencetest: cached branch %s: %w (remove it to write it again)", dir, err)
	}
	work, err := os.MkdirTemp(fastTempDir(), "signet-synth-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	key, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	if err != nil {
		return nil, err
	}
	approver, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	if err != nil {
		return nil, err
	}
	// The writer's mirror, about 34 KB a run since consolidation writes
	// tree versions as deltas (140–280 KB before), some 3.4 GB at 10^5
	// runs: on disk, so that it does not take that much of the memory.
	state, err := os.MkdirTemp(os.TempDir(), "signet-synth-state-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(state)
	s, err := synthesize(ctx, work, state, runs, checks, key, approver)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(os.TempDir(), ".signet-synth-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if _, err := Git("", nil, "clone", "-q", "--bare", "--no-local", s.Remote, filepath.Join(tmp, "remote.git")); err != nil {
		return nil, err
	}
	pem, err := key.MarshalPEM(nil)
	if err != nil {
		return nil, err
	}
	policy, err := s.Policy.MarshalYAML()
	if err != nil {
		return nil, err
	}
	meta, err := json.Marshal(synthMeta{Runs: s.Runs, Documents: s.Documents})
	if err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{"reconciler.pem": pem, "trust.yaml": policy, "meta.json": meta} {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if s, lerr := loadSynthetic(dir); lerr == nil {
			return s, nil // another process cached it first
		}
		return nil, err
	}
	return loadSynthetic(dir)
}

// synthStamp digests the generator's sources and the sizes.
func synthStamp(runs, checks int) (string, error) {
	h := sha256.New()
	for _, name := range []string{"synth.go", "synthcache.go"} {
		b, err := synthSources.ReadFile(name)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	fmt.Fprintf(h, "runs %d checks %d", runs, checks)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// loadSynthetic reads a cached synthetic branch; os.ErrNotExist when
// there is none.
func loadSynthetic(dir string) (*Synthetic, error) {
	mb, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, err
	}
	var meta synthMeta
	if err := json.Unmarshal(mb, &meta); err != nil {
		return nil, fmt.Errorf("meta.json: %w", err)
	}
	key, err := signing.LoadPrivateKey(filepath.Join(dir, "reconciler.pem"), nil)
	if err != nil {
		return nil, err
	}
	policy, err := signing.LoadTrustPolicy(filepath.Join(dir, "trust.yaml"))
	if err != nil {
		return nil, err
	}
	return &Synthetic{Remote: filepath.Join(dir, "remote.git"), Policy: policy, Reconciler: key, Runs: meta.Runs, Documents: meta.Documents}, nil
}

// fastTempDir is /dev/shm when it is a writable directory (a tmpfs,
// where the store's fsyncs cost nothing), else the system temporary
// directory.
func fastTempDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", ".signet-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return os.TempDir()
}
