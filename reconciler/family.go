package reconciler

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// FamilyEnv is what a FamilyFactory builds its family from: the whole
// configuration (a family reads only its own sections), the evidence
// branch its reservations name, and the reconciler's logger, metrics
// registry (nil: not exported) and clock.
type FamilyEnv struct {
	Config     *Config
	EvidenceID string
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// FamilyFactory builds one backend family from env. It returns nil and no
// error when env.Config does not enable the family; an error stops Build.
type FamilyFactory func(ctx context.Context, env FamilyEnv) (*backend.Family, error)

var families = struct {
	sync.Mutex
	byName map[string]FamilyFactory
}{byName: map[string]FamilyFactory{}}

// RegisterFamily makes a backend family available to Build under name,
// from an init function of the family's package (as database/sql drivers
// register). It panics when name is registered twice or f is nil.
func RegisterFamily(name string, f FamilyFactory) {
	families.Lock()
	defer families.Unlock()
	if f == nil {
		panic("reconciler: RegisterFamily of " + name + " with a nil factory")
	}
	if _, dup := families.byName[name]; dup {
		panic("reconciler: RegisterFamily called twice for " + name)
	}
	families.byName[name] = f
}

// buildFamilies builds every registered family that env.Config enables,
// in name order.
func buildFamilies(ctx context.Context, env FamilyEnv) ([]*backend.Family, error) {
	families.Lock()
	byName := maps.Clone(families.byName)
	families.Unlock()
	var out []*backend.Family
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		fam, err := byName[name](ctx, env)
		if err != nil {
			return nil, err
		}
		if fam != nil {
			out = append(out, fam)
		}
	}
	return out, nil
}

// checkFamilies refuses families that are incomplete or share a check
// kind: every kind must name exactly one family.
func checkFamilies(fams []*backend.Family) error {
	owner := map[specs.Backend]string{}
	for _, f := range fams {
		if f.Fleet == nil {
			return fmt.Errorf("backend family %s has no fleet", f.Name)
		}
		for _, k := range slices.Sorted(maps.Keys(f.Backends)) {
			if o, dup := owner[k]; dup {
				return fmt.Errorf("backends: check kind %q is served by both the %s and the %s family; enable one", k, o, f.Name)
			}
			owner[k] = f.Name
		}
	}
	return nil
}

// familyFor returns the family that serves every check of prof. The error
// names the profile and its check kinds.
func (r *Reconciler) familyFor(prof *specs.CertificationProfile) (*backend.Family, error) {
	for _, f := range r.families {
		if f.Serves(prof) {
			return f, nil
		}
	}
	kinds := map[string]bool{}
	for _, c := range prof.Spec.Checks {
		kinds[string(c.Backend)] = true
	}
	return nil, fmt.Errorf("profile %s has %s checks; no one backend family of this reconciler serves them all", prof.Metadata.Name, strings.Join(slices.Sorted(maps.Keys(kinds)), " and "))
}

// fleetFor is the Fleet of the family serving prof, or nil when none of
// this reconciler's families does (it was configured away since the run
// was admitted): then nothing is reserved outside the reconciler to lift.
func (r *Reconciler) fleetFor(prof *specs.CertificationProfile) backend.Fleet {
	f, err := r.familyFor(prof)
	if err != nil {
		return nil
	}
	return f.Fleet
}

// backendFor returns the backend serving check kind b.
func (r *Reconciler) backendFor(b specs.Backend) (Backend, error) {
	for _, f := range r.families {
		if be, ok := f.Backends[b]; ok {
			return be, nil
		}
	}
	return nil, fmt.Errorf("backend %q is not enabled in this reconciler", b)
}

// serves reports whether one of the reconciler's families serves kind b.
func (r *Reconciler) serves(b specs.Backend) bool {
	_, err := r.backendFor(b)
	return err == nil
}
