package reconciler

import (
	"context"
	"strconv"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// CheckRun is everything a backend needs to run one check of one run. It
// is built from the durable admission record and intent, never from the
// spec repository's current state.
type CheckRun struct {
	Cluster      string
	Run          string
	Index        int
	Check        specs.Check
	Script       []byte // verified against ScriptDigest
	ScriptDigest specs.Digest
	Nonce        string
	Deadline     time.Time
	Participants []evidence.Participant
}

// Env returns DESIGN §4's environment for participant index p, without
// SIGNET_RESULT_FILE, which the backend sets. The stage variable is set
// only for staged checks, and never for an MPI launcher.
func (c *CheckRun) Env(p int) map[string]string {
	env := map[string]string{
		specs.EnvRunID:            c.Run,
		specs.EnvCheckName:        c.Check.Name,
		specs.EnvCheckIndex:       strconv.Itoa(c.Index),
		specs.EnvNonce:            c.Nonce,
		specs.EnvParticipantIndex: strconv.Itoa(p),
		specs.EnvParticipants:     strconv.Itoa(len(c.Participants)),
		specs.EnvGPUCount:         strconv.Itoa(c.Check.GPUCount),
	}
	if c.Check.Stage != "" {
		env[specs.EnvStageName] = c.Check.Stage
	}
	return env
}

// ParticipantReport is what a backend observed of one participant.
type ParticipantReport struct {
	Node        string
	Identity    evidence.Identity
	Termination specs.Termination
	Result      []byte // nil when no result was produced
	Stdout      []byte
	Stderr      []byte
}

// CheckReport is what a backend observed of one check.
type CheckReport struct {
	StartedAt    time.Time
	EndedAt      time.Time
	Participants []ParticipantReport
}

// Backend runs checks. A backend is never asked to create the backend
// object of one (run, check) twice: the reconciler calls Run only right
// after writing the intent, and Adopt after a restart.
type Backend interface {
	// Describe returns the names of the backend objects Run will create and
	// the digest of the rendered backend object, recorded in the intent.
	Describe(c *CheckRun) (names []string, rendered specs.Digest, err error)
	// Run creates the backend object and waits for a terminal state, the
	// deadline, or ctx's cancellation (cancel). It leaves the object in
	// place for Cleanup.
	Run(ctx context.Context, c *CheckRun) (*CheckReport, error)
	// Adopt finds the backend object of an intent written before a
	// restart. found is false when nothing is left to observe: the check
	// was interrupted and must be recorded as Error, never re-run.
	Adopt(ctx context.Context, c *CheckRun) (report *CheckReport, found bool, err error)
	// Cleanup removes what Run left, after the check evidence is durable.
	Cleanup(ctx context.Context, c *CheckRun) error
}
