package signing

import (
	"errors"
	"fmt"
)

// ErrVerification is matched (errors.Is) by every *VerifyError: the bytes
// were read but are not what a trusted signer produced. Failures to read or
// parse input are ordinary errors and never match it.
var ErrVerification = errors.New("verification failed")

// VerifyKind says why a signature did not count. Callers decide on it (the
// auditor maps each kind to a rule); they never parse the message.
type VerifyKind int

const (
	// KindUnsigned: the document carries no signature at all (a commit
	// without a gpgsig header).
	KindUnsigned VerifyKind = iota + 1
	// KindMalformed: the signature is not one (not an armored SSH
	// signature).
	KindMalformed
	// KindBadSignature: a signature made by, or naming, an allowed key does
	// not verify: forged or corrupted.
	KindBadSignature
	// KindUnknownKey: the signature was made by a key the role does not
	// allow and the trust policy gives no other role.
	KindUnknownKey
	// KindNotAllowed: the signature was made by a key the trust policy
	// holds for another role (an approver's key on evidence).
	KindNotAllowed
	// KindKeyNotValid: the signature verifies with an allowed key that is
	// outside its validity window, or revoked, at the time judged.
	KindKeyNotValid
)

var kindNames = [...]string{
	KindUnsigned: "unsigned", KindMalformed: "malformed", KindBadSignature: "bad signature",
	KindUnknownKey: "unknown key", KindNotAllowed: "key not allowed", KindKeyNotValid: "key not valid",
}

func (k VerifyKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("VerifyKind(%d)", int(k))
}

// VerifyError says which document failed verification, of what kind, and
// why. It matches ErrVerification and unwraps to its cause.
type VerifyError struct {
	// What names the document: a file, "commit signature", or
	// "<predicateType> envelope".
	What string
	// Kind is what a caller decides on.
	Kind VerifyKind
	// Err is the cause: one line without secrets, naming the key.
	Err error
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("%s: verification failed: %v", e.What, e.Err)
}

// Unwrap returns the cause.
func (e *VerifyError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrVerification) true.
func (e *VerifyError) Is(target error) bool { return target == ErrVerification }

func verifyErrorf(kind VerifyKind, what, format string, args ...any) *VerifyError {
	return &VerifyError{What: what, Kind: kind, Err: fmt.Errorf(format, args...)}
}
