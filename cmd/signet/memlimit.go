package main

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"signet.dev/signet/evidence/audit"
)

// memoryLimitOptions are --memory-limit of the commands that read a whole
// evidence branch (audit, report): the Go runtime's soft memory limit for
// the process (docs/decisions.md, "Audit memory: a soft limit").
type memoryLimitOptions struct {
	Limit string
}

// AddFlags registers --memory-limit.
func (o *memoryLimitOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Limit, "memory-limit", resource.NewQuantity(audit.DefaultMemoryLimit, resource.BinarySI).String(),
		"soft limit of the process's memory (a quantity: 768Mi, 2Gi): as the heap nears it the collector runs more often instead of letting the heap grow to twice what is live; 0 for none; unless given, GOMEMLIMIT wins when set")
}

// apply sets the limit; fs tells whether the flag was given. A value that
// is not a quantity of bytes is a usage error naming it.
func (o *memoryLimitOptions) apply(fs *pflag.FlagSet) error {
	if !fs.Changed("memory-limit") && os.Getenv("GOMEMLIMIT") != "" {
		return nil // the runtime read it at start
	}
	q, err := resource.ParseQuantity(o.Limit)
	if err != nil {
		return &usageError{fmt.Errorf("--memory-limit %q: %w", o.Limit, err)}
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 || (n > 0 && n < minMemoryLimit) {
		return &usageError{fmt.Errorf("--memory-limit %q: want 0 (no limit) or a whole number of bytes of at least %s", o.Limit, resource.NewQuantity(minMemoryLimit, resource.BinarySI))}
	}
	if n == 0 {
		n = math.MaxInt64 // the runtime's "no limit"
	}
	debug.SetMemoryLimit(n)
	return nil
}

// minMemoryLimit refuses a limit too small to be meant: below it the
// collector would run all the time.
const minMemoryLimit = 64 << 20
