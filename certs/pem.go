package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// FileError is an error about one PEM file: which file, in which role, and
// what is wrong with it. Every error of Load, Reload and LoadCA about a
// file's contents is one, so a caller can name the file to an operator.
type FileError struct {
	Role string // "certificate", "key" or "CA"
	Path string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s file %s: %v", e.Role, e.Path, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// readFile reads a PEM file, naming it in the error.
func readFile(role, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &FileError{role, path, errors.New("missing (no such file)")}
	case err != nil:
		return nil, &FileError{role, path, unwrapPathError(err)}
	case len(bytes.TrimSpace(data)) == 0:
		return nil, &FileError{role, path, errors.New("empty")}
	}
	return data, nil
}

// unwrapPathError drops the path from an *fs.PathError, which FileError
// already names.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// pemBlocks decodes every PEM block of data. A file with no complete block,
// or with bytes after its last block that are not one (a file cut short
// while it was written, or garbage), is an error: half a file is never
// taken for a whole one.
func pemBlocks(data []byte) ([]*pem.Block, error) {
	var blocks []*pem.Block
	rest := data
	for {
		b, r := pem.Decode(rest)
		if b == nil {
			break
		}
		blocks = append(blocks, b)
		rest = r
	}
	if len(blocks) == 0 {
		return nil, errors.New("not PEM: no complete -----BEGIN ...----- / -----END ...----- block (cut short, or not a PEM file)")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("cut short or damaged after PEM block %d (%d bytes that are not a complete PEM block)",
			len(blocks), len(bytes.TrimSpace(rest)))
	}
	return blocks, nil
}

// blockTypes lists the types of blocks, for error messages.
func blockTypes(blocks []*pem.Block) string {
	var ts []string
	for _, b := range blocks {
		ts = append(ts, b.Type)
	}
	return strings.Join(ts, ", ")
}

// parseCertificates returns the certificates of the CERTIFICATE blocks of
// a PEM file, in order, and their DER bytes; other blocks are ignored (a
// file may hold a certificate and its key together).
func parseCertificates(data []byte) ([]*x509.Certificate, [][]byte, error) {
	blocks, err := pemBlocks(data)
	if err != nil {
		return nil, nil, err
	}
	var certs []*x509.Certificate
	var ders [][]byte
	for _, b := range blocks {
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("certificate %d: %v", len(certs)+1, err)
		}
		certs = append(certs, c)
		ders = append(ders, b.Bytes)
	}
	if len(certs) == 0 {
		return nil, nil, fmt.Errorf("no CERTIFICATE block (found %s)", blockTypes(blocks))
	}
	return certs, ders, nil
}

// parsePrivateKey returns the key of the first private key block of a PEM
// file: PKCS #8, SEC 1 (EC) or PKCS #1 (RSA). Encrypted keys are refused:
// a node must start unattended.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	blocks, err := pemBlocks(data)
	if err != nil {
		return nil, err
	}
	for _, b := range blocks {
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue
		}
		if b.Type == "ENCRYPTED PRIVATE KEY" || b.Headers["Proc-Type"] != "" {
			return nil, errors.New("the private key is encrypted; give an unencrypted key")
		}
		var key any
		switch b.Type {
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("%s block: %v", b.Type, err)
		}
		switch k := key.(type) {
		case *ecdsa.PrivateKey:
			return k, nil
		case *rsa.PrivateKey:
			return k, nil
		case ed25519.PrivateKey:
			return k, nil
		default:
			return nil, fmt.Errorf("%s block: unsupported key type %T", b.Type, key)
		}
	}
	return nil, fmt.Errorf("no PRIVATE KEY block (found %s)", blockTypes(blocks))
}

// matches reports whether key is the private half of cert's public key.
func matches(key crypto.Signer, cert *x509.Certificate) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// encodeKey returns key as a PKCS #8 "PRIVATE KEY" PEM block.
func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// encodeCert returns a DER certificate as a PEM block.
func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
