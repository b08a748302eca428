package main

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/rolloutd/rolloutd/internal/authz"
)

// The kinds of identity a client certificate carries, as tags: the form
// authz.Identity names identities in.
var identityKinds = []string{"uri", "dns", "cn"}

// dnsName is a DNS name, as a DNS SAN holds it.
var dnsName = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

// parseIdentity returns the tagged form of an identity a flag names, by the
// rules of the authorization policy: "uri:…", "dns:…" and "cn:…" are that
// kind; an untagged URI with a scheme (spiffe://…) is a URI SAN, an
// untagged DNS name a DNS SAN; anything else must say cn:, so that a common
// name never counts by accident.
func parseIdentity(s string) (string, error) {
	if s == "" || strings.TrimSpace(s) != s {
		return "", fmt.Errorf("identity %q: must be non-empty, without surrounding spaces", s)
	}
	if kind, value, ok := strings.Cut(s, ":"); ok {
		for _, k := range identityKinds {
			if strings.EqualFold(kind, k) {
				if value == "" {
					return "", fmt.Errorf("identity %q: no value after the tag", s)
				}
				return k + ":" + value, nil
			}
		}
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && strings.Contains(s, "://") {
		return "uri:" + s, nil
	}
	if dnsName.MatchString(s) {
		return "dns:" + s, nil
	}
	return "", fmt.Errorf("identity %q: neither a URI (spiffe://…) nor a DNS name; a common name counts only tagged: write %q", s, "cn:"+s)
}

// certIdentity is the identity of a verified client certificate in tagged
// form: authz.Identity's, which names the kind ("uri:spiffe://…"). An
// authz.Identity that returns the bare value gets the tag of the kind it
// came from, so that a common name never passes for a SAN.
func certIdentity(cert *x509.Certificate) string {
	id := authz.Identity(cert)
	kind, value := "cn", cert.Subject.CommonName
	switch {
	case len(cert.URIs) > 0:
		kind, value = "uri", cert.URIs[0].String()
	case len(cert.DNSNames) > 0:
		kind, value = "dns", cert.DNSNames[0]
	}
	if id == value {
		return kind + ":" + value
	}
	return id
}
