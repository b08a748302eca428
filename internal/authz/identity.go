package authz

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
)

// The kinds of identity a certificate can carry. An identity is written
// with its kind as a tag: "uri:spiffe://cluster.local/ns/team-a/sa/trainer",
// "dns:reader.team-b.example", "cn:Some Name".
const (
	KindURI = "uri" // a URI SAN, such as a SPIFFE ID
	KindDNS = "dns" // a DNS SAN
	KindCN  = "cn"  // the subject common name of a certificate with no SAN
)

// Identity is a client certificate's identity, tagged with its kind: "uri:"
// and its first URI SAN (a SPIFFE ID such as
// spiffe://cluster.local/ns/team-a/sa/trainer), else "dns:" and its first
// DNS SAN, else "cn:" and its subject common name; "" when it has none of
// them. The certificate must already be verified; Identity only reads it.
//
// Only the first SAN of a kind counts, so a certificate cannot claim two
// identities; issue one certificate per workload. The tag keeps the kinds
// apart: a common name that reads like a SPIFFE ID is "cn:spiffe://…", and
// no grant to "uri:spiffe://…" covers it.
func Identity(cert *x509.Certificate) string {
	switch {
	case cert == nil:
		return ""
	case len(cert.URIs) > 0:
		return KindURI + ":" + cert.URIs[0].String()
	case len(cert.DNSNames) > 0:
		return KindDNS + ":" + cert.DNSNames[0]
	case cert.Subject.CommonName != "":
		return KindCN + ":" + cert.Subject.CommonName
	}
	return ""
}

// ParseIdentity returns the tagged form of an identity as a policy (or a
// flag) names it:
//
//   - "uri:…", "dns:…" and "cn:…" (the tag in any case) are that kind;
//   - an untagged identity that parses as a URI with a scheme
//     ("spiffe://…") is a URI SAN;
//   - an untagged identity that is a DNS name ("reader.team-b.example") is
//     a DNS SAN;
//   - anything else is an error: a common name counts only where it is
//     tagged "cn:", so that no policy grants one by accident.
//
// A uri: value must parse as a URI with a scheme, a dns: value must be a
// DNS name (a leading "*." label allowed), and a cn: value must not be
// empty. Values are compared exactly (case included) with the
// certificate's.
func ParseIdentity(s string) (string, error) {
	if s == "" || strings.TrimSpace(s) != s {
		return "", fmt.Errorf("identity %q: must be non-empty, without surrounding spaces", s)
	}
	if kind, value, ok := strings.Cut(s, ":"); ok {
		switch k := strings.ToLower(kind); k {
		case KindURI, KindDNS, KindCN:
			if err := checkIdentityValue(k, value); err != nil {
				return "", fmt.Errorf("identity %q: %w", s, err)
			}
			return k + ":" + value, nil
		}
	}
	if checkIdentityValue(KindURI, s) == nil {
		return KindURI + ":" + s, nil
	}
	if checkIdentityValue(KindDNS, s) == nil {
		return KindDNS + ":" + s, nil
	}
	return "", fmt.Errorf("identity %q: neither a URI with a scheme (a URI SAN, such as spiffe://…) nor a DNS name (a DNS SAN); "+
		"a certificate's common name is an identity only where the policy says so: write %q", s, KindCN+":"+s)
}

// checkIdentityValue checks the value of an identity of kind.
func checkIdentityValue(kind, v string) error {
	if v == "" || strings.TrimSpace(v) != v {
		return fmt.Errorf("the %s value must be non-empty, without surrounding spaces", kind)
	}
	switch kind {
	case KindURI:
		u, err := url.Parse(v)
		if err != nil {
			return fmt.Errorf("not a URI: %v", err)
		}
		if u.Scheme == "" {
			return fmt.Errorf("a URI needs a scheme (such as spiffe://)")
		}
	case KindDNS:
		if !isDNSName(v) {
			return fmt.Errorf("not a DNS name (letters, digits, '-' and '_' in dot-separated labels; '*' only as the first label)")
		}
	}
	return nil
}

// isDNSName reports whether s is a DNS name as certificates carry them:
// dot-separated labels of 1–63 letters, digits, '-' or '_', at most 253
// bytes, the first label possibly "*".
func isDNSName(s string) bool {
	labels := strings.Split(s, ".")
	if len(s) > 253 || (labels[0] == "*" && len(labels) == 1) {
		return false
	}
	for i, label := range labels {
		if label == "*" && i == 0 {
			continue
		}
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			switch {
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
			default:
				return false
			}
		}
	}
	return true
}
