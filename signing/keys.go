package signing

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/hiddeco/sshsig"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/crypto/ssh"
)

// Key algorithms accepted by GenerateKey. Only ECDSA P-256 (SHA-256) and
// Ed25519 keys are read or written anywhere in signet; RSA and other curves
// are refused.
const (
	AlgorithmECDSAP256 = "ecdsa-p256"
	AlgorithmEd25519   = "ed25519"
)

// MaxKeyFileSize bounds a PEM key file read by LoadPrivateKey.
const MaxKeyFileSize = 64 << 10

// ErrPassphraseRequired is returned when an encrypted private key is read
// without a passphrase.
var ErrPassphraseRequired = errors.New("private key is encrypted: a passphrase is required (give it with --passphrase-file or --passphrase-env; in a ReconcilerConfig, passphraseFile or passphraseEnv)")

// PrivateKey is a signing key: a sigstore SignerVerifier plus its public half.
type PrivateKey struct {
	priv crypto.PrivateKey
	sv   signature.SignerVerifier
	pub  *PublicKey
}

// PublicKey is a verification key with its signet key id.
type PublicKey struct {
	key      crypto.PublicKey
	der      []byte
	id       string
	dsseID   string
	verifier signature.Verifier
}

// GenerateKey returns a new key of alg: "ecdsa-p256" (also the meaning of
// "") or "ed25519".
func GenerateKey(alg string) (*PrivateKey, error) {
	switch alg {
	case "", AlgorithmECDSAP256:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generating ecdsa-p256 key: %w", err)
		}
		return newPrivateKey(k)
	case AlgorithmEd25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generating ed25519 key: %w", err)
		}
		return newPrivateKey(k)
	}
	return nil, fmt.Errorf("algorithm %q is not %s or %s", alg, AlgorithmECDSAP256, AlgorithmEd25519)
}

func newPrivateKey(k crypto.PrivateKey) (*PrivateKey, error) {
	var pubKey crypto.PublicKey
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("ecdsa key on curve %s: only P-256 is accepted", k.Curve.Params().Name)
		}
		pubKey = k.Public()
	case ed25519.PrivateKey:
		pubKey = k.Public()
	default:
		return nil, fmt.Errorf("key type %T is not ecdsa-p256 or ed25519", k)
	}
	sv, err := signature.LoadSignerVerifier(k, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("loading signer: %w", err)
	}
	pub, err := newPublicKey(pubKey)
	if err != nil {
		return nil, err
	}
	return &PrivateKey{priv: k, sv: sv, pub: pub}, nil
}

func newPublicKey(k crypto.PublicKey) (*PublicKey, error) {
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("ecdsa key on curve %s: only P-256 is accepted", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
		// Its length needs no check here: x509.ParsePKIXPublicKey, the ssh
		// parsers and a PKCS#8 private key only yield 32-byte keys, and
		// ssh.NewPublicKey below refuses any other length.
	default:
		return nil, fmt.Errorf("public key type %T is not ecdsa-p256 or ed25519", k)
	}
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding public key: %w", err)
	}
	v, err := signature.LoadVerifier(k, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("loading verifier: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding public key for ssh: %w", err)
	}
	sum := sha256.Sum256(der)
	return &PublicKey{key: k, der: der, id: hex.EncodeToString(sum[:]), dsseID: ssh.FingerprintSHA256(sshPub), verifier: v}, nil
}

// LoadPrivateKey reads a PEM private key file (see ParsePrivateKeyPEM). The
// error names the file; it never contains the passphrase or key material.
func LoadPrivateKey(path string, passphrase []byte) (*PrivateKey, error) {
	b, err := readBounded(path, MaxKeyFileSize)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivateKeyPEM(b, passphrase)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParsePrivateKeyPEM parses a PKCS#8 "PRIVATE KEY" PEM block, or sigstore's
// (cosign's) "ENCRYPTED SIGSTORE PRIVATE KEY" block decrypted with
// passphrase. Only ecdsa-p256 and ed25519 keys are accepted.
func ParsePrivateKeyPEM(b, passphrase []byte) (*PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var (
		k   crypto.PrivateKey
		err error
	)
	switch block.Type {
	case string(cryptoutils.PrivateKeyPEMType):
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case string(cryptoutils.EncryptedSigstorePrivateKeyPEMType), "ENCRYPTED COSIGN PRIVATE KEY":
		if len(passphrase) == 0 {
			return nil, ErrPassphraseRequired
		}
		k, err = cryptoutils.UnmarshalPEMToPrivateKey(b, cryptoutils.StaticPasswordFunc(passphrase))
		if err != nil {
			// sigstore's message for a wrong passphrase is "decryption failed".
			return nil, fmt.Errorf("decrypting private key (wrong passphrase?): %w", err)
		}
	default:
		return nil, fmt.Errorf("PEM block type %q is not %q or %q", block.Type, cryptoutils.PrivateKeyPEMType, cryptoutils.EncryptedSigstorePrivateKeyPEMType)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing private key: %w", err)
	}
	return newPrivateKey(k)
}

// MarshalPEM encodes k as PKCS#8 PEM; with a non-empty passphrase, as
// sigstore's encrypted format (scrypt + secretbox, what cosign writes).
func (k *PrivateKey) MarshalPEM(passphrase []byte) ([]byte, error) {
	if len(passphrase) == 0 {
		b, err := cryptoutils.MarshalPrivateKeyToPEM(k.priv)
		if err != nil {
			return nil, fmt.Errorf("encoding private key: %w", err)
		}
		return b, nil
	}
	der, err := cryptoutils.MarshalPrivateKeyToEncryptedDER(k.priv, cryptoutils.StaticPasswordFunc(passphrase))
	if err != nil {
		return nil, fmt.Errorf("encrypting private key: %w", err)
	}
	return cryptoutils.PEMEncode(cryptoutils.EncryptedSigstorePrivateKeyPEMType, der), nil
}

// KeyID returns the key's id: lowercase hex sha256 of its PKIX DER public key.
func (k *PrivateKey) KeyID() string { return k.pub.id }

// Public returns the public half of k.
func (k *PrivateKey) Public() *PublicKey { return k.pub }

// Algorithm returns "ecdsa-p256" or "ed25519".
func (k *PrivateKey) Algorithm() string { return k.pub.Algorithm() }

// SSHSigner returns an ssh.Signer over the same key, for signing git commits
// (gpg.format=ssh).
func (k *PrivateKey) SSHSigner() (ssh.Signer, error) {
	s, err := ssh.NewSignerFromKey(k.priv)
	if err != nil {
		return nil, fmt.Errorf("ssh signer: %w", err)
	}
	return s, nil
}

// sign returns the raw signature of msg: ASN.1 DER ECDSA over SHA-256(msg),
// or plain Ed25519 over msg.
func (k *PrivateKey) sign(msg []byte) ([]byte, error) {
	return k.sv.SignMessage(bytes.NewReader(msg))
}

// ParsePublicKeyPEM parses a PKIX "PUBLIC KEY" PEM block holding an
// ecdsa-p256 or ed25519 key.
func ParsePublicKeyPEM(b []byte) (*PublicKey, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	if block.Type != string(cryptoutils.PublicKeyPEMType) {
		return nil, fmt.Errorf("PEM block type %q is not %q", block.Type, cryptoutils.PublicKeyPEMType)
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, errors.New("data after the PEM block")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing public key: %w", err)
	}
	return newPublicKey(k)
}

// ParseSSHAuthorizedKey parses one authorized_keys line
// ("ssh-ed25519 AAAA… comment") holding an ed25519 or ecdsa-p256 key.
func ParseSSHAuthorizedKey(line []byte) (*PublicKey, error) {
	pk, _, _, rest, err := ssh.ParseAuthorizedKey(line)
	if err != nil {
		return nil, fmt.Errorf("parsing ssh public key: %w", err)
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, errors.New("more than one ssh public key")
	}
	cpk, ok := pk.(ssh.CryptoPublicKey)
	if !ok {
		return nil, fmt.Errorf("ssh key type %s has no crypto public key", pk.Type())
	}
	return newPublicKey(cpk.CryptoPublicKey())
}

// KeyID returns the key's id: lowercase hex sha256 of its PKIX DER encoding.
func (p *PublicKey) KeyID() string { return p.id }

// DSSEKeyID returns the keyid signet writes into DSSE signatures: the
// OpenSSH SHA256 fingerprint ("SHA256:<base64>"), which is what
// go-securesystemslib's dsse.SHA256KeyID computes and what cosign matches a
// non-empty keyid against.
func (p *PublicKey) DSSEKeyID() string { return p.dsseID }

// Algorithm returns "ecdsa-p256" or "ed25519".
func (p *PublicKey) Algorithm() string {
	if _, ok := p.key.(ed25519.PublicKey); ok {
		return AlgorithmEd25519
	}
	return AlgorithmECDSAP256
}

// CryptoPublicKey returns the standard library key.
func (p *PublicKey) CryptoPublicKey() crypto.PublicKey { return p.key }

// MarshalPEM encodes p as a PKIX "PUBLIC KEY" PEM block.
func (p *PublicKey) MarshalPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: string(cryptoutils.PublicKeyPEMType), Bytes: p.der})
}

// SSHAuthorizedKey returns p as one authorized_keys line without comment,
// e.g. "ecdsa-sha2-nistp256 AAAA…", for git allowed-signers files.
func (p *PublicKey) SSHAuthorizedKey() string {
	sp, err := ssh.NewPublicKey(p.key)
	if err != nil { // unreachable: newPublicKey checked the type
		return ""
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
}

// sshPublicKey returns p in ssh form.
func (p *PublicKey) sshPublicKey() ssh.PublicKey {
	sp, _ := ssh.NewPublicKey(p.key)
	return sp
}

// verify reports whether sig is a valid signature of msg by p.
func (p *PublicKey) verify(msg, sig []byte) bool {
	return p.verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(msg)) == nil
}

// readBounded reads a regular file of at most limit bytes. It opens the
// path without blocking, so that a named pipe is refused as not a regular
// file instead of hanging until something writes to it.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("could not read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("could not read %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes is larger than the limit of %d", path, st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("could not read %s: %w", path, err)
	}
	return b, nil
}

func sshFingerprint(sig *sshsig.Signature) string { return ssh.FingerprintSHA256(sig.PublicKey) }
