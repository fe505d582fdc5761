package signing

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"signet.dev/signet/specs"
)

// DecideRendering decides every object of r, and for every request whose
// spec.cancel or spec.release is true also that action (subject
// "CertificationRequest/<name>#cancel" / "#release" with the request's
// digest), in r's object order with each action right after its request.
func (p *TrustPolicy) DecideRendering(r *specs.Rendering, approvals []*Approval, cluster string, now time.Time) []Decision {
	idx := indexApprovals(approvals)
	out := make([]Decision, 0, len(r.Objects))
	for _, o := range r.Objects {
		out = append(out, p.decide(o.Ref(), o.Digest, idx[o.Ref()], cluster, now))
		for _, a := range RequestedActions(o) {
			s := SubjectName(o.Kind, o.Name, a)
			out = append(out, p.decide(s, o.Digest, idx[s], cluster, now))
		}
	}
	return out
}

// RequestedActions returns the actions a rendered object asks for: a
// request's "cancel" and "release", a standing certification's
// "release:<run>" for each firing its spec.release lists; none for a
// profile.
func RequestedActions(o *specs.Object) []string {
	if o != nil && o.Standing != nil {
		var out []string
		for _, run := range o.Standing.Spec.Release {
			out = append(out, specs.StandingReleaseAction(run))
		}
		return out
	}
	if o == nil || o.Request == nil {
		return nil
	}
	var out []string
	if o.Request.Spec.Cancel {
		out = append(out, ActionCancel)
	}
	if o.Request.Spec.Release {
		out = append(out, ActionRelease)
	}
	return out
}

// MaxPassphraseSize bounds a passphrase file.
const MaxPassphraseSize = 4096

// ReadPassphrase returns the passphrase from file (its content without one
// trailing newline) or from the environment variable env; nil when both are
// empty; an error when both are given, the file is unreadable, or the
// variable is unset or empty. Errors never contain the passphrase.
func ReadPassphrase(file, env string) ([]byte, error) {
	switch {
	case file != "" && env != "":
		return nil, errors.New("give the passphrase either as a file or as an environment variable, not both")
	case file != "":
		b, err := readBounded(file, MaxPassphraseSize)
		if err != nil {
			return nil, fmt.Errorf("passphrase file: %w", err)
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if s == "" {
			return nil, fmt.Errorf("passphrase file %s is empty", file)
		}
		return []byte(s), nil
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return nil, fmt.Errorf("passphrase environment variable %s is unset or empty", env)
		}
		return []byte(v), nil
	}
	return nil, nil
}
