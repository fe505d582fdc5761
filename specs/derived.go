package specs

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// CheckReserve is the time the run deadline adds for each check on top of
// its own deadline, for result collection, evidence and cleanup
// (DESIGN §2 asks for at least 60 s).
const CheckReserve = 60 * time.Second

// MaxCheckDeadline is the longest deadline one check may ask for. It keeps
// every derived duration far from overflow; a burn-in longer than a week is
// several checks.
const MaxCheckDeadline Seconds = 7 * 24 * 60 * 60

// GPUResource is the extended resource that a check's gpuCount requests.
const GPUResource = "nvidia.com/gpu"

var secondsRE = regexp.MustCompile(`^[0-9]+s$`)

// ParseSeconds returns s as Seconds when it is a whole, positive number of
// seconds written like "600s" and at most MaxCheckDeadline. The error says
// what is wrong with the value and, where the intent is clear, how to write
// it ("90" → "90s", "1m" → "60s").
func ParseSeconds(s string) (Seconds, error) {
	if !secondsRE.MatchString(s) {
		if _, err := strconv.ParseUint(s, 10, 63); err == nil {
			return 0, fmt.Errorf("%q is not whole seconds (%q)", s, s+"s")
		}
		if d, err := time.ParseDuration(s); err == nil && d > 0 && d%time.Second == 0 {
			return 0, fmt.Errorf("%q is not whole seconds (%q)", s, strconv.FormatInt(int64(d/time.Second), 10)+"s")
		}
		return 0, fmt.Errorf("%q is not a whole positive number of seconds like \"600s\"", s)
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if err != nil || n > int64(MaxCheckDeadline) {
		return 0, fmt.Errorf("%q is longer than the longest deadline, %s", s, MaxCheckDeadline)
	}
	if n == 0 {
		return 0, fmt.Errorf("%q is not positive", s)
	}
	return Seconds(n), nil
}

// String returns s as written in specs, e.g. "600s".
func (s Seconds) String() string { return strconv.FormatInt(int64(s), 10) + "s" }

// Duration returns s as a time.Duration.
func (s Seconds) Duration() time.Duration { return time.Duration(s) * time.Second }

// MarshalJSON writes s as the string "600s".
func (s Seconds) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON accepts only the string form ParseSeconds accepts.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("%s is not whole seconds written as a string like \"600s\"", b)
	}
	v, err := ParseSeconds(str)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// IsLocal reports whether p is a local profile: it has checks and every one
// of them runs on the local backend.
func (p *CertificationProfile) IsLocal() bool {
	if len(p.Spec.Checks) == 0 {
		return false
	}
	for _, c := range p.Spec.Checks {
		if c.Backend != BackendLocal {
			return false
		}
	}
	return true
}

// RunDeadline is the derived deadline of one run of p: the sum of its check
// deadlines plus CheckReserve per check. It is never written in a spec.
func (p *CertificationProfile) RunDeadline() time.Duration {
	var d time.Duration
	for _, c := range p.Spec.Checks {
		d += c.Deadline.Duration() + CheckReserve
	}
	return d
}

// Floor is the derived per-node eligibility floor of p: per resource, the
// largest request of any check (a limit stands for a missing request, as in
// Kubernetes), with GPUResource taken from the largest gpuCount. A resource
// no check asks for is absent; the map is empty, never nil, when nothing is
// asked for.
func (p *CertificationProfile) Floor() map[string]resource.Quantity {
	floor := map[string]resource.Quantity{}
	raise := func(name string, q resource.Quantity) {
		if cur, ok := floor[name]; !ok || q.Cmp(cur) > 0 {
			floor[name] = q.DeepCopy()
		}
	}
	for _, c := range p.Spec.Checks {
		if c.GPUCount > 0 {
			raise(GPUResource, *resource.NewQuantity(int64(c.GPUCount), resource.DecimalSI))
		}
		if c.Workload == nil {
			continue
		}
		for name, q := range c.Workload.Resources.Limits {
			if _, ok := c.Workload.Resources.Requests[name]; !ok {
				raise(name, q)
			}
		}
		for name, q := range c.Workload.Resources.Requests {
			raise(name, q)
		}
	}
	return floor
}

// MinInterval is the shortest Every a standing certification may ask for:
// shorter would recertify a node while its last run's evidence is still
// being written.
const MinInterval = 10 * time.Minute

// Duration returns i as a time.Duration: a positive whole number of
// seconds written as time.ParseDuration reads it ("168h", "90m").
func (i Interval) Duration() (time.Duration, error) {
	d, err := time.ParseDuration(string(i))
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration like 168h or 90m", string(i))
	case d <= 0:
		return 0, fmt.Errorf("%q is not positive", string(i))
	case d%time.Second != 0:
		return 0, fmt.Errorf("%q is not a whole number of seconds", string(i))
	}
	return d, nil
}

// normalized is i as time.Duration writes it, or i itself when it does not
// parse (or is empty).
func (i Interval) normalized() Interval {
	d, err := i.Duration()
	if err != nil {
		return i
	}
	return Interval(d.String())
}
