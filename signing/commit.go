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

// MaxCommitSize bounds a raw commit object given to VerifyCommit.
const MaxCommitSize = 1 << 20

// ErrUnsignedCommit is returned (wrapped in a *VerifyError) for a
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

// VerifyCommit checks the SSH signature (gpg.format=ssh, namespace "git")
// of a raw commit object against s and returns the id of the key that made
// it, which must be valid at `at`. A malformed or oversized commit is a
// plain error; an unsigned commit (KindUnsigned, wrapping
// ErrUnsignedCommit), a signature that is not SSH (KindMalformed), one by a
// key s does not hold (KindUnknownKey), one that does not verify
// (KindBadSignature) and one by a key outside its validity
// (KindKeyNotValid) are a *VerifyError.
func VerifyCommit(rawCommit []byte, s Signers, at time.Time) (string, error) {
	if len(rawCommit) > MaxCommitSize {
		return "", fmt.Errorf("commit: %d bytes is more than the limit of %d", len(rawCommit), MaxCommitSize)
	}
	payload, armored, err := SplitCommitSignature(rawCommit)
	if err != nil {
		return "", err
	}
	const what = "commit signature"
	if armored == nil {
		return "", &VerifyError{What: what, Kind: KindUnsigned, Err: ErrUnsignedCommit}
	}
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return "", verifyErrorf(KindMalformed, what, "not an SSH signature: %v", err)
	}
	var signer *PublicKey
	fp := sshFingerprint(sig)
	for _, k := range s.keys {
		if k.DSSEKeyID() == fp {
			signer = k
			break
		}
	}
	if signer == nil {
		return "", verifyErrorf(KindUnknownKey, what, "signed by key %s, which is not %s", fp, s.name)
	}
	if err := sshsig.Verify(bytes.NewReader(payload), sig, signer.sshPublicKey(), sig.HashAlgorithm, CommitSignatureNamespace); err != nil {
		return "", verifyErrorf(KindBadSignature, what, "bad signature by key %s: %v", keyAbbrev(signer.KeyID()), err)
	}
	if r := s.validAt(signer.KeyID(), at); r != "" {
		return "", verifyErrorf(KindKeyNotValid, what, "%s", r)
	}
	return signer.KeyID(), nil
}
