package authz

import "crypto/x509"

// Identity is a client certificate's identity: its first URI SAN (a SPIFFE
// ID such as spiffe://cluster.local/ns/team-a/sa/trainer), else its first
// DNS SAN, else its subject common name. The certificate must already be
// verified; Identity only reads it.
//
// Only the first SAN of a kind counts, so a certificate cannot claim two
// identities; issue one certificate per workload.
func Identity(cert *x509.Certificate) string {
	switch {
	case cert == nil:
		return ""
	case len(cert.URIs) > 0:
		return cert.URIs[0].String()
	case len(cert.DNSNames) > 0:
		return cert.DNSNames[0]
	default:
		return cert.Subject.CommonName
	}
}
