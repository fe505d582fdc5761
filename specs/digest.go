package specs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"

	"github.com/opencontainers/go-digest"
)

// Digest is a validated content digest in signet's one representation:
// "sha256:" followed by 64 lowercase hex characters.
type Digest string

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParseDigest returns s as a Digest, or an error when s is not exactly
// "sha256:" + 64 lowercase hex: bare hex, uppercase, another algorithm,
// truncated, extended and whitespace-padded values are all refused.
func ParseDigest(s string) (Digest, error) {
	if !digestRE.MatchString(s) {
		return "", fmt.Errorf("%q is not a digest of the form sha256:<64 lowercase hex>", s)
	}
	d, err := digest.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	if d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("%q: algorithm %q is not sha256", s, d.Algorithm())
	}
	return Digest(d), nil
}

// DigestOf returns the sha256 digest of b.
func DigestOf(b []byte) Digest {
	sum := sha256.Sum256(b)
	return Digest("sha256:" + hex.EncodeToString(sum[:]))
}

// Hex returns the 64 hex characters of d, without the algorithm prefix.
func (d Digest) Hex() string {
	if len(d) < len("sha256:") {
		return ""
	}
	return string(d[len("sha256:"):])
}

// String returns d as written in documents.
func (d Digest) String() string { return string(d) }
