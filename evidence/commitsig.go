package evidence

import (
	"bytes"
	"fmt"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/signing"
)

// verifySSHSig verifies an armored SSH signature (namespace "git") of
// payload by one of signers and returns that key's id. A signature by any
// other key is refused naming its fingerprint.
func verifySSHSig(payload, armored []byte, signers []*signing.PublicKey) (string, error) {
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return "", fmt.Errorf("not an SSH signature: %v", err)
	}
	fp := ssh.FingerprintSHA256(sig.PublicKey)
	for _, k := range signers {
		if k.DSSEKeyID() != fp {
			continue
		}
		pub, err := ssh.NewPublicKey(k.CryptoPublicKey())
		if err != nil {
			return "", fmt.Errorf("key %s: %v", shortHash(k.KeyID()), err)
		}
		if err := sshsig.Verify(bytes.NewReader(payload), sig, pub, sig.HashAlgorithm, signing.CommitSignatureNamespace); err != nil {
			return "", fmt.Errorf("bad signature by key %s: %v", shortHash(k.KeyID()), err)
		}
		return k.KeyID(), nil
	}
	return "", fmt.Errorf("signed by key %s, which is not an evidence signer of the trust policy", fp)
}
