package signing

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/hiddeco/sshsig"
)

// CommitSignatureNamespace is the SSH signature namespace git uses.
const CommitSignatureNamespace = "git"

// MaxCommitSize bounds a raw commit object given to VerifyCommitSignature.
const MaxCommitSize = 1 << 20

// ErrUnsignedCommit is returned (wrapped in a VerificationError) for a
// commit without a gpgsig header.
var ErrUnsignedCommit = errors.New("commit is not signed")

// SplitCommitSignature splits a raw git commit object (the body git
// cat-file commit prints, optionally preceded by the "commit <size>\x00"
// loose-object header) into the bytes git signed (the object without its
// gpgsig header) and the armored signature. It returns a nil signature for
// an unsigned commit and an error for a malformed object or more than one
// signature header.
func SplitCommitSignature(raw []byte) (payload, armored []byte, err error) {
	if bytes.HasPrefix(raw, []byte("commit ")) {
		if i := bytes.IndexByte(raw, 0); i >= 0 && i < 32 {
			raw = raw[i+1:]
		}
	}
	var out, sig bytes.Buffer
	out.Grow(len(raw))
	rest := raw
	inSig := false
	seen := false
	for len(rest) > 0 {
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			return nil, nil, errors.New("commit: header not terminated by a newline")
		}
		line := rest[:nl+1]
		rest = rest[nl+1:]
		if len(line) == 1 { // blank line: the message follows
			out.Write(line)
			out.Write(rest)
			return out.Bytes(), nilIfEmpty(sig.Bytes()), nil
		}
		if line[0] == ' ' {
			if inSig {
				sig.Write(line[1:])
			} else {
				out.Write(line)
			}
			continue
		}
		inSig = false
		switch {
		case bytes.HasPrefix(line, []byte("gpgsig ")), bytes.HasPrefix(line, []byte("gpgsig-sha256 ")):
			if seen {
				return nil, nil, errors.New("commit: more than one signature header")
			}
			seen, inSig = true, true
			sig.Write(line[bytes.IndexByte(line, ' ')+1:])
		default:
			out.Write(line)
		}
	}
	return out.Bytes(), nilIfEmpty(sig.Bytes()), nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// VerifyCommitSignature checks the SSH signature (gpg.format=ssh, namespace
// "git") of a raw commit object against the policy's commitSigners and
// returns the id of the key that made it. The key must be valid (window,
// not revoked) at `at`. A malformed commit is a plain error; an unsigned
// commit, a signature by a key that is not a commit signer and a bad
// signature are *VerificationError.
func VerifyCommitSignature(rawCommit []byte, p *TrustPolicy, at time.Time) (string, error) {
	if len(rawCommit) > MaxCommitSize {
		return "", fmt.Errorf("commit: %d bytes is more than the limit of %d", len(rawCommit), MaxCommitSize)
	}
	payload, armored, err := SplitCommitSignature(rawCommit)
	if err != nil {
		return "", err
	}
	const what = "commit signature"
	if armored == nil {
		return "", &VerificationError{What: what, Reason: ErrUnsignedCommit.Error()}
	}
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return "", verificationErrorf(what, "not an SSH signature: %v", err)
	}
	var signer *PublicKey
	fp := sshFingerprint(sig)
	for _, k := range p.CommitSigners() {
		if k.DSSEKeyID() == fp {
			signer = k
			break
		}
	}
	if signer == nil {
		return "", verificationErrorf(what, "signing key %s is not a commit signer in the trust policy", fp)
	}
	if err := sshsig.Verify(bytes.NewReader(payload), sig, signer.sshPublicKey(), sig.HashAlgorithm, CommitSignatureNamespace); err != nil {
		return "", verificationErrorf(what, "bad signature by key %s: %v", short(signer.KeyID()), err)
	}
	if r := p.KeyValidAt(signer.KeyID(), at); r != "" {
		return "", verificationErrorf(what, "%s", r)
	}
	return signer.KeyID(), nil
}
