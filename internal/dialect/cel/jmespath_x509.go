package cel

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
)

// x509PublicKey is how x509_decode shows an RSA public key: the modulus in decimal
// and the exponent (Kyverno's jmespath.PublicKey).
type x509PublicKey struct {
	N string
	E int
}

// jpX509Decode is Kyverno's x509_decode: the first PEM block of its argument, a
// CERTIFICATE or a CERTIFICATE REQUEST with an RSA key, as the object encoding/json
// makes of Go's x509.Certificate or x509.CertificateRequest (field names as Go
// spells them, []byte fields in base64, times in RFC 3339), its PublicKey replaced by
// {"N": modulus, "E": exponent}.
func jpX509Decode(args []any) (any, error) {
	s, err := jpString("x509_decode", args, 0)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, errors.New("failed to decode PEM block")
	}
	switch block.Type {
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		if cert.PublicKey, err = rsaPublicKey(cert.PublicKeyAlgorithm, cert.PublicKey); err != nil {
			return nil, err
		}
		return jsonObject(cert)
	case "CERTIFICATE REQUEST":
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return nil, err
		}
		if csr.PublicKey, err = rsaPublicKey(csr.PublicKeyAlgorithm, csr.PublicKey); err != nil {
			return nil, err
		}
		return jsonObject(csr)
	}
	return nil, errors.New("PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST")
}

// rsaPublicKey is the parsed key of a certificate or request as x509_decode shows it;
// only RSA keys are accepted.
func rsaPublicKey(alg x509.PublicKeyAlgorithm, key any) (x509PublicKey, error) {
	if alg != x509.RSA {
		return x509PublicKey{}, errors.New("certificate should use rsa algorithm")
	}
	pk, ok := key.(*rsa.PublicKey)
	if !ok { // crypto/x509 parses every RSA key it accepts into an *rsa.PublicKey
		return x509PublicKey{}, errors.New("failed to parse subject public key info")
	}
	return x509PublicKey{N: pk.N.String(), E: pk.E}, nil
}

// jsonObject is v through encoding/json, as a JSON object.
func jsonObject(v any) (any, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		return nil, err
	}
	return out, nil
}
