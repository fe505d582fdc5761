package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"signet.dev/signet/evidence"
)

// TipKeeperFactory builds the evidence.TipKeeper of cfg.Evidence.TipConfigMap.
type TipKeeperFactory func(ctx context.Context, cfg *Config) (evidence.TipKeeper, error)

var tipKeeper struct {
	sync.Mutex
	factory TipKeeperFactory
}

// RegisterTipKeeper makes the keeper of evidence.tipConfigMap available
// to Build, from an init function of the package that talks to the
// cluster (reconciler/kube). It panics when called twice or with nil.
func RegisterTipKeeper(f TipKeeperFactory) {
	tipKeeper.Lock()
	defer tipKeeper.Unlock()
	if f == nil || tipKeeper.factory != nil {
		panic("reconciler: RegisterTipKeeper called twice or with nil")
	}
	tipKeeper.factory = f
}

// buildTipKeeper returns the keeper cfg names, nil when it names none.
func buildTipKeeper(ctx context.Context, cfg *Config) (evidence.TipKeeper, error) {
	if cfg.Evidence.TipConfigMap == nil {
		return nil, nil
	}
	tipKeeper.Lock()
	f := tipKeeper.factory
	tipKeeper.Unlock()
	if f == nil {
		return nil, errors.New("evidence.tipConfigMap: this binary cannot reach Kubernetes (no keeper registered)")
	}
	k, err := f(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("evidence.tipConfigMap: %w", err)
	}
	return k, nil
}

// unanchoredHint turns the store's ErrUnanchored into what the operator
// must do: pin a tip or accept the current one once.
func unanchoredHint(cfg *Config, err error) error {
	return fmt.Errorf("evidence store: %w\n"+
		"a person must act, once: audit the branch (signet audit --repo %s --branch %s --trust FILE prints the tip to pin at the end of a clean audit) "+
		"and set evidence.pinnedTip in the reconciler's config to it (signet run: --pinned-tip), or start it once with --accept-current-tip to trust the branch as it is now",
		err, redactURL(cfg.Evidence.URL), cfg.Evidence.Branch)
}
