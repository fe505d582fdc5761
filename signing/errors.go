package signing

import (
	"errors"
	"fmt"
)

// ErrVerification is matched (errors.Is) by every VerificationError: the
// bytes were read but are not what a trusted signer produced. Failures to
// read or parse input are ordinary errors and never match it.
var ErrVerification = errors.New("verification failed")

// VerificationError says which document failed verification and why.
type VerificationError struct {
	// What names the document: a file, a subject or "commit <sha>".
	What string
	// Reason is a one-line explanation without secrets.
	Reason string
}

func (e *VerificationError) Error() string {
	return fmt.Sprintf("%s: verification failed: %s", e.What, e.Reason)
}

// Unwrap makes errors.Is(err, ErrVerification) true.
func (e *VerificationError) Unwrap() error { return ErrVerification }

func verificationErrorf(what, format string, args ...any) error {
	return &VerificationError{What: what, Reason: fmt.Sprintf(format, args...)}
}
