// Command csr-oracle reads CertificateSigningRequest `spec.request` bytes exactly as kube-apiserver
// and the kube-controller-manager CSR signer read them, and prints what they see, so tests can
// compare another parser's reading of the same bytes with Go's.
//
// Protocol: every stdin line is the standard base64 (padded) of one raw `spec.request`; for every
// line one JSON object line goes to stdout, flushed at once:
//
//	{"ok":true,"common_name":"system:node:n1","common_names":["system:node:n1"],
//	 "organizations":["system:nodes"],"dns_names":["n1.example.com"],
//	 "ip_addresses":["10.0.0.11","fd00::11"],"emails":[],"uris":[]}
//	{"ok":false,"stage":"pem"|"type"|"x509"|"signature"|"sign"|"input","error":"..."}
//
// It runs the Kubernetes code itself (k8s.io/kubernetes at the version of tools/versions.env),
// in the order a request meets it:
//
// kube-apiserver, on every create and update of a CSR (pkg/apis/certificates/validation,
// validateCertificateSigningRequest → validateCSR), rejects the object when either fails:
//   - pkg/apis/certificates/helpers.go ParseCSR: pem.Decode takes the first block Go's decoder
//     accepts (text before and after it is ignored; a BEGIN line whose END does not match is
//     skipped, so a later block can win); its type must be exactly "CERTIFICATE REQUEST"
//     (PEM headers are allowed); x509.ParseCertificateRequest parses the DER (no trailing bytes;
//     a SubjectAltName extension whose entries do not parse is an error).
//     Stages "pem" (no block), "type" (another type), "x509" (DER or extension error).
//   - validateCSR: CertificateRequest.CheckSignature, so the apiserver does verify the
//     self-signature (SHA-1 accepted, MD5 not). Stage "signature".
//
// The subjectrestriction admission plugin parses the request again only for the signer
// kubernetes.io/kube-apiserver-client (no O=system:masters); it does not apply to kubelet signers.
//
// kube-controller-manager's signer, for an approved, not failed CSR of its signer name
// (pkg/controller/certificates/signer/signer.go, (*signer).handle):
//   - ParseCSR again (an error is only logged and retried; the CSR stays approved, unsigned).
//   - isKubeletServing / isKubeletClient → ValidateKubeletServingCSR / ValidateKubeletClientCSR
//     (pkg/apis/certificates/helpers.go): rules on the parsed request and spec.usages whose
//     failure sets the condition Failed (SignerValidationFailure). They need spec.usages, which
//     this protocol does not carry, so they are left to the caller.
//   - (*signer).sign → pkg/controller/certificates/authority/authority.go
//     (*CertificateAuthority).Sign: x509.ParseCertificateRequest and CheckSignature once more,
//     then a certificate built from the parsed fields, not from the request's bytes: the
//     subject is re-encoded from the pkix.Name (CommonName holds the last CN only; attributes
//     Go does not map are dropped), SANs from DNSNames, IPAddresses (4 bytes when To4 succeeds),
//     EmailAddresses and URIs; every other requested extension is dropped
//     (authority/policies.go, PermissiveSigningPolicy.apply). Stage "sign".
//
// This program signs every accepted request with the real CertificateAuthority.Sign and a CA of
// its own, and reports the subject and SANs of the certificate it issued: what the signer would
// write. "common_names" alone comes from the request: every CN (2.5.4.3) with a string value, in
// the order of Subject.Names (Go ignores CNs of other ASN.1 types). Stage "input" means a line
// that is not valid base64.
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"time"

	capi "k8s.io/api/certificates/v1"
	"k8s.io/kubernetes/pkg/apis/certificates"
	"k8s.io/kubernetes/pkg/controller/certificates/authority"
)

// accepted is the answer for a request both the apiserver and the signer take.
type accepted struct {
	OK            bool     `json:"ok"`
	CommonName    string   `json:"common_name"`
	CommonNames   []string `json:"common_names"`
	Organizations []string `json:"organizations"`
	DNSNames      []string `json:"dns_names"`
	IPAddresses   []string `json:"ip_addresses"`
	Emails        []string `json:"emails"`
	URIs          []string `json:"uris"`
}

// rejected is the answer for a request the apiserver or the signer refuses.
type rejected struct {
	OK    bool   `json:"ok"`
	Stage string `json:"stage"`
	Error string `json:"error"`
}

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

func main() {
	ca, err := newAuthority()
	if err != nil {
		fmt.Fprintf(os.Stderr, "csr-oracle: %v\n", err)
		os.Exit(1)
	}
	if err := serve(ca, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "csr-oracle: %v\n", err)
		os.Exit(1)
	}
}

// serve answers every line of in with one JSON line on out until in ends.
func serve(ca *authority.CertificateAuthority, in io.Reader, out io.Writer) error {
	reader := bufio.NewReaderSize(in, 1<<20)
	writer := bufio.NewWriterSize(out, 1<<16)
	encoder := json.NewEncoder(writer)
	encoder.SetEscapeHTML(false)
	for {
		line, readErr := reader.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return fmt.Errorf("reading stdin: %w", readErr)
		}
		if len(line) > 0 {
			if err := encoder.Encode(answer(ca, line)); err != nil {
				return fmt.Errorf("writing stdout: %w", err)
			}
			if err := writer.Flush(); err != nil {
				return fmt.Errorf("writing stdout: %w", err)
			}
		}
		if readErr != nil {
			return nil
		}
	}
}

// answer reads one input line: base64 of a request, with its line ending.
func answer(ca *authority.CertificateAuthority, line []byte) any {
	request, err := base64.StdEncoding.DecodeString(string(trimEOL(line)))
	if err != nil {
		return rejected{Stage: "input", Error: "line is not standard base64: " + err.Error()}
	}
	return read(ca, request)
}

// read runs request through the apiserver's validation and the signer.
func read(ca *authority.CertificateAuthority, request []byte) any {
	csr, err := certificates.ParseCSR(request)
	if err != nil {
		return rejected{Stage: parseStage(request), Error: err.Error()}
	}
	if err := csr.CheckSignature(); err != nil {
		return rejected{Stage: "signature", Error: err.Error()}
	}
	der, err := ca.Sign(csr.Raw, authority.PermissiveSigningPolicy{
		TTL:      24 * time.Hour,
		Usages:   []capi.KeyUsage{capi.UsageDigitalSignature, capi.UsageServerAuth},
		Backdate: 5 * time.Minute,
		Short:    8 * time.Hour,
	})
	if err != nil {
		return rejected{Stage: "sign", Error: err.Error()}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return rejected{Stage: "sign", Error: "parsing the issued certificate: " + err.Error()}
	}
	ips := make([]string, 0, len(cert.IPAddresses))
	for _, ip := range cert.IPAddresses {
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		ips = append(ips, ip.String())
	}
	uris := make([]string, 0, len(cert.URIs))
	for _, uri := range cert.URIs {
		uris = append(uris, uri.String())
	}
	return accepted{
		OK:            true,
		CommonName:    cert.Subject.CommonName,
		CommonNames:   commonNames(csr.Subject),
		Organizations: orEmpty(cert.Subject.Organization),
		DNSNames:      orEmpty(cert.DNSNames),
		IPAddresses:   ips,
		Emails:        orEmpty(cert.EmailAddresses),
		URIs:          uris,
	}
}

// parseStage names the step of certificates.ParseCSR that refused request; it repeats that
// function's first two checks, which share one error message.
func parseStage(request []byte) string {
	block, _ := pem.Decode(request)
	switch {
	case block == nil:
		return "pem"
	case block.Type != "CERTIFICATE REQUEST":
		return "type"
	default:
		return "x509"
	}
}

// commonNames lists the string values of every CN attribute of name, in order.
func commonNames(name pkix.Name) []string {
	names := []string{}
	for _, attribute := range name.Names {
		if value, ok := attribute.Value.(string); ok && attribute.Type.Equal(oidCommonName) {
			names = append(names, value)
		}
	}
	return names
}

func orEmpty(values []string) []string {
	if values == nil {
		return []string{}
	}
	return values
}

func trimEOL(line []byte) []byte {
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	return line
}

// newAuthority makes a throwaway ECDSA P-256 CA, valid for ten years, to sign with.
func newAuthority() (*authority.CertificateAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "csr-oracle"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	return &authority.CertificateAuthority{Certificate: cert, PrivateKey: key}, nil
}
