package authz

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
	"github.com/rolloutd/rolloutd/internal/validate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The identities of policyYAML, tagged as Identity returns them. The
// policy names them untagged: a URI means uri:, a DNS name dns:.
const (
	trainerA = "uri:spiffe://cluster.local/ns/team-a/sa/trainer"
	readerB  = "dns:eval-reader.team-b.example"
	admin    = "dns:rolloutd-admin"
)

const policyYAML = `
# team-a's trainer owns team-a; team-b's reader reads team-a's evals and
# team-b; the admin reads everything.
grants:
  - identities: ["spiffe://cluster.local/ns/team-a/sa/trainer"]
    shardPrefixes: ["team-a/"]
    verbs: [append, get, scan]
  - identities: [eval-reader.team-b.example]
    shardPrefixes: [team-a/eval, team-b]
    verbs: [get, scan]
  - identities: [rolloutd-admin]
    shardPrefixes: ["*"]
    verbs: [get, scan]
`

// The same policy as JSON.
const policyJSON = `{"grants": [
	{"identities": ["spiffe://cluster.local/ns/team-a/sa/trainer"], "shardPrefixes": ["team-a/"], "verbs": ["append", "get", "scan"]},
	{"identities": ["eval-reader.team-b.example"], "shardPrefixes": ["team-a/eval", "team-b"], "verbs": ["get", "scan"]},
	{"identities": ["rolloutd-admin"], "shardPrefixes": ["*"], "verbs": ["get", "scan"]}
]}`

// The authorization table: every identity × verb × shard, including shards
// that share a prefix but not a path boundary with a grant.
func TestAuthorizeTable(t *testing.T) {
	shards := []string{"team-a", "team-a/run1", "team-a/eval", "team-a/eval/x", "team-a/evaluation", "team-ab", "team-ab/run1", "team-b/run1", "team-c"}
	allowed := map[string]map[Verb][]string{
		trainerA: {
			Append: {"team-a", "team-a/run1", "team-a/eval", "team-a/eval/x", "team-a/evaluation"},
			Get:    {"team-a", "team-a/run1", "team-a/eval", "team-a/eval/x", "team-a/evaluation"},
			Scan:   {"team-a", "team-a/run1", "team-a/eval", "team-a/eval/x", "team-a/evaluation"},
		},
		readerB: {
			Get:  {"team-a/eval", "team-a/eval/x", "team-b/run1"},
			Scan: {"team-a/eval", "team-a/eval/x", "team-b/run1"},
		},
		admin: {
			Get:  shards,
			Scan: shards,
		},
		"uri:spiffe://cluster.local/ns/team-a/sa/trainer/": {}, // not the trainer
		"uri:SPIFFE://cluster.local/ns/team-a/sa/trainer":  {},
		"spiffe://cluster.local/ns/team-a/sa/trainer":      {}, // untagged: never an identity
		"cn:spiffe://cluster.local/ns/team-a/sa/trainer":   {}, // a CN that reads like the trainer's SPIFFE ID
		"dns:spiffe://cluster.local/ns/team-a/sa/trainer":  {},
		"cn:eval-reader.team-b.example":                    {}, // a CN that reads like the reader's DNS name
		"cn:rolloutd-admin":                                {},
		"":                                                 {}, // no identity
	}
	for name, src := range map[string]string{"yaml": policyYAML, "json": policyJSON} {
		p, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a := NewStatic(p)
		for id, verbs := range allowed {
			for _, verb := range Verbs {
				for _, s := range shards {
					err := a.Authorize(id, verb, s)
					want := contains(verbs[verb], s)
					if (err == nil) != want {
						t.Errorf("%s: %q %s %q: got %v, want allowed=%v", name, id, verb, s, err, want)
					}
					if err != nil {
						var d *DeniedError
						if !errors.As(err, &d) || !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), string(verb)) ||
							(id != "" && !strings.Contains(err.Error(), id)) {
							t.Errorf("%s: %q %s %q: error %v does not name the identity and verb", name, id, verb, s, err)
						}
					}
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A shard that is not a valid name is never authorized, even under "*":
// "team-a/../team-b" must not pass as team-a's.
func TestAuthorizeInvalidShard(t *testing.T) {
	p, err := Parse([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	a := NewStatic(p)
	for _, s := range []string{"team-a/../team-b", "team-a/", "/team-a", "team-a//x", "TEAM-A", ""} {
		for _, id := range []string{trainerA, admin} {
			if err := a.Authorize(id, Get, s); !errors.Is(err, validate.ErrInvalid) {
				t.Errorf("%q get %q: %v, want a validation error", id, s, err)
			}
		}
	}
}

func TestParseRejects(t *testing.T) {
	for name, src := range map[string]string{
		"empty":              "",
		"comments only":      "# nothing\n",
		"no grants":          "grants: []\n",
		"unknown field":      "grants:\n  - identities: [a]\n    shardPrefixes: [s]\n    verbs: [get]\n    verb: [append]\n",
		"misspelled top":     "grant:\n  - identities: [a]\n",
		"unknown verb":       "grants:\n  - identities: [a]\n    shardPrefixes: [s]\n    verbs: [purge]\n",
		"no verbs":           "grants:\n  - identities: [a]\n    shardPrefixes: [s]\n",
		"no prefixes":        "grants:\n  - identities: [a]\n    verbs: [get]\n",
		"no identities":      "grants:\n  - shardPrefixes: [s]\n    verbs: [get]\n",
		"empty identity":     "grants:\n  - identities: ['']\n    shardPrefixes: [s]\n    verbs: [get]\n",
		"bad prefix":         "grants:\n  - identities: [a]\n    shardPrefixes: [Team-A]\n    verbs: [get]\n",
		"dotdot prefix":      "grants:\n  - identities: [a]\n    shardPrefixes: [a/..]\n    verbs: [get]\n",
		"empty prefix":       "grants:\n  - identities: [a]\n    shardPrefixes: ['']\n    verbs: [get]\n",
		"wildcard in prefix": "grants:\n  - identities: [a]\n    shardPrefixes: [team-*]\n    verbs: [get]\n",
		"two documents":      "grants:\n  - identities: [a]\n    shardPrefixes: [s]\n    verbs: [get]\n---\ngrants: []\n",
		"json unknown field": `{"grants": [{"identities": ["a"], "shardPrefixes": ["s"], "verbs": ["get"], "extra": 1}]}`,
		"json trailing data": `{"grants": [{"identities": ["a"], "shardPrefixes": ["s"], "verbs": ["get"]}]} {}`,
		"json truncated":     `{"grants": [{"identities": ["a"], "shardPrefixes": ["s"]`,
		"duplicate key":      "grants:\n  - identities: [a]\n    identities: [b]\n    shardPrefixes: [s]\n    verbs: [get]\n",
		"untagged CN":        "grants:\n  - identities: ['Some Name']\n    shardPrefixes: [s]\n    verbs: [get]\n",
		"uri without scheme": "grants:\n  - identities: ['uri:team-a/trainer']\n    shardPrefixes: [s]\n    verbs: [get]\n",
		"dns with a space":   "grants:\n  - identities: ['dns:a b.example']\n    shardPrefixes: [s]\n    verbs: [get]\n",
		"empty cn":           "grants:\n  - identities: ['cn:']\n    shardPrefixes: [s]\n    verbs: [get]\n",
		"spaced identity":    "grants:\n  - identities: [' a']\n    shardPrefixes: [s]\n    verbs: [get]\n",
	} {
		if _, err := Parse([]byte(src)); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%s: %v, want ErrInvalidPolicy", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// Reloading: a valid change applies; a broken one is rejected with a log
// line and the old policy stays in force (never fail open, never fail
// closed on a typo).
func TestReloadKeepsOldPolicyOnBrokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	testpki.WriteFile(t, path, []byte(policyYAML))
	core, logs := observer.New(zap.InfoLevel)
	a, err := Load(path, -1, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Authorize(trainerA, Append, "team-a/run1"); err != nil {
		t.Fatal(err)
	}

	// Broken: a misspelled field. The trainer keeps its grant; nobody new
	// gets one.
	testpki.WriteFile(t, path, []byte(strings.Replace(policyYAML, "shardPrefixes: [team-a/eval", "shardPrefix: [team-a/eval", 1)))
	if changed, err := a.Check(); changed || !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("broken policy: changed %v, %v", changed, err)
	}
	if err := a.Authorize(trainerA, Append, "team-a/run1"); err != nil {
		t.Errorf("after a broken reload: %v", err)
	}
	if err := a.Authorize(readerB, Get, "team-b/run1"); err != nil {
		t.Errorf("after a broken reload the reader lost its grant: %v", err)
	}
	if logs.FilterMessageSnippet("rejected").Len() != 1 {
		t.Errorf("no log line for the rejected policy: %v", logs.All())
	}
	// Truncated to nothing: also rejected.
	testpki.WriteFile(t, path, nil)
	if _, err := a.Check(); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("empty policy file: %v", err)
	}
	if err := a.Authorize(trainerA, Append, "team-a/run1"); err != nil {
		t.Errorf("after an empty file: %v", err)
	}

	// A valid change that revokes the trainer's append applies at once.
	testpki.WriteFile(t, path, []byte(strings.Replace(policyYAML, "verbs: [append, get, scan]", "verbs: [get]", 1)))
	if changed, err := a.Check(); !changed || err != nil {
		t.Fatalf("valid change: changed %v, %v", changed, err)
	}
	if err := a.Authorize(trainerA, Append, "team-a/run1"); !errors.Is(err, ErrDenied) {
		t.Errorf("append after revocation: %v", err)
	}
	if loads, failures := a.Stats(); loads != 2 || failures != 2 {
		t.Errorf("stats %d loads, %d failures; want 2, 2", loads, failures)
	}
}

func TestLoadRejectsBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("grants: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, -1, nil); !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "--authz-file") {
		t.Errorf("Load of an invalid policy: %v", err)
	}
}

func TestIdentity(t *testing.T) {
	ca := testpki.NewCA(t, "CA")
	for _, tc := range []struct {
		leaf *testpki.Leaf
		want string
	}{
		{ca.ClientURI(t, "spiffe://cluster.local/ns/team-a/sa/trainer"), trainerA},
		{ca.ClientDNS(t, "eval-reader.team-b.example"), readerB},
		{ca.ClientCN(t, "Some Name"), "cn:Some Name"},
		// A common name that reads like a SPIFFE ID is still a common name.
		{ca.ClientCN(t, "spiffe://cluster.local/ns/team-a/sa/trainer"), "cn:spiffe://cluster.local/ns/team-a/sa/trainer"},
		{ca.ClientCN(t, ""), ""},
	} {
		if got := Identity(tc.leaf.Cert); got != tc.want {
			t.Errorf("Identity = %q, want %q", got, tc.want)
		}
	}
	if Identity(nil) != "" {
		t.Error("Identity(nil) not empty")
	}
}

func TestParseIdentity(t *testing.T) {
	for in, want := range map[string]string{
		// Untagged, as old policies name identities.
		"spiffe://cluster.local/ns/team-a/sa/trainer": "uri:spiffe://cluster.local/ns/team-a/sa/trainer",
		"urn:example:trainer":                         "uri:urn:example:trainer",
		"eval-reader.team-b.example":                  "dns:eval-reader.team-b.example",
		"rolloutd-admin":                              "dns:rolloutd-admin",
		"*.team-b.example":                            "dns:*.team-b.example",
		// Tagged; the tag in any case.
		"uri:spiffe://x/y":                         "uri:spiffe://x/y",
		"URI:spiffe://x/y":                         "uri:spiffe://x/y",
		"dns:reader.example":                       "dns:reader.example",
		"cn:Some Name":                             "cn:Some Name",
		"CN:spiffe://cluster.local/ns/team-a/sa/x": "cn:spiffe://cluster.local/ns/team-a/sa/x",
	} {
		got, err := ParseIdentity(in)
		if err != nil || got != want {
			t.Errorf("ParseIdentity(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", " a", "a ", "Some Name", "uri:", "uri:no-scheme", "dns:", "dns:a b", "dns:a..b", "dns:*", "dns:a.*.b", "cn:", "cn: x", "team-a/trainer"} {
		if got, err := ParseIdentity(in); err == nil {
			t.Errorf("ParseIdentity(%q) = %q, want an error", in, got)
		}
	}
	_, err := ParseIdentity("Some Name")
	if err == nil || !strings.Contains(err.Error(), `"cn:Some Name"`) {
		t.Errorf("an untagged common name: %v, want advice to write cn:Some Name", err)
	}
}

// A certificate's common name grants nothing unless the policy names it
// cn:. Before identities were tagged, a certificate with
// CN=spiffe://…/team-a/… and no URI SAN got team-a's grants.
func TestCommonNameOnlyWhenTagged(t *testing.T) {
	ca := testpki.NewCA(t, "CA")
	p, err := Parse([]byte(`grants:
  - identities: ["spiffe://cluster.local/ns/team-a/sa/trainer", eval-reader.team-b.example]
    shardPrefixes: [team-a]
    verbs: [append, get, scan]
  - identities: ["cn:Legacy Reader", "CN:spiffe://cluster.local/ns/team-c/sa/x"]
    shardPrefixes: [team-c]
    verbs: [get]
`))
	if err != nil {
		t.Fatal(err)
	}
	a := NewStatic(p)
	for _, tc := range []struct {
		name    string
		leaf    *testpki.Leaf
		verb    Verb
		shard   string
		allowed bool
	}{
		{"URI SAN, untagged grant", ca.ClientURI(t, "spiffe://cluster.local/ns/team-a/sa/trainer"), Append, "team-a/run1", true},
		{"DNS SAN, untagged grant", ca.ClientDNS(t, "eval-reader.team-b.example"), Scan, "team-a/run1", true},
		{"CN reading like a granted URI", ca.ClientCN(t, "spiffe://cluster.local/ns/team-a/sa/trainer"), Append, "team-a/run1", false},
		{"CN reading like a granted DNS name", ca.ClientCN(t, "eval-reader.team-b.example"), Get, "team-a/run1", false},
		{"CN granted as cn:", ca.ClientCN(t, "Legacy Reader"), Get, "team-c/x", true},
		{"CN granted as cn:, another verb", ca.ClientCN(t, "Legacy Reader"), Append, "team-c/x", false},
		{"CN granted as cn: that reads like a URI", ca.ClientCN(t, "spiffe://cluster.local/ns/team-c/sa/x"), Get, "team-c/x", true},
		{"URI SAN of a cn: grant", ca.ClientURI(t, "spiffe://cluster.local/ns/team-c/sa/x"), Get, "team-c/x", false},
		{"DNS SAN named like a cn: grant", ca.ClientDNS(t, "Legacy-Reader"), Get, "team-c/x", false},
	} {
		id := Identity(tc.leaf.Cert)
		err := a.Authorize(id, tc.verb, tc.shard)
		if (err == nil) != tc.allowed {
			t.Errorf("%s: %s %s %s: %v, want allowed=%v", tc.name, id, tc.verb, tc.shard, err, tc.allowed)
		}
	}
	// A CN refused where the policy grants the same name as a SAN says why.
	err = a.Authorize(Identity(ca.ClientCN(t, "eval-reader.team-b.example").Cert), Get, "team-a/run1")
	if err == nil || !strings.Contains(err.Error(), `"dns:eval-reader.team-b.example"`) || !strings.Contains(err.Error(), `"cn:eval-reader.team-b.example"`) {
		t.Errorf("a CN refused for a DNS grant: %v, want a hint naming both forms", err)
	}
}

// Every verb is accepted in a policy, and an unknown one is refused with
// the list of known verbs, all taken from Verbs: a new verb needs no other
// change in this package.
func TestVerbsComeFromOneList(t *testing.T) {
	for _, v := range Verbs {
		if _, err := Parse([]byte("grants:\n  - identities: [a]\n    shardPrefixes: [s]\n    verbs: [" + string(v) + "]\n")); err != nil {
			t.Errorf("verb %s: %v", v, err)
		}
		if msg := (&DeniedError{Identity: "dns:a", Verb: v, Shard: "s"}).Error(); !strings.Contains(msg, verbPhrase(v)+` shard "s"`) {
			t.Errorf("refusal of %s: %q", v, msg)
		}
	}
	_, err := Parse([]byte("grants:\n  - identities: [a]\n    shardPrefixes: [s]\n    verbs: [purge]\n"))
	for _, v := range Verbs {
		if err == nil || !strings.Contains(err.Error(), string(v)) {
			t.Errorf("unknown verb: %v, want the known verbs listed (%s missing)", err, v)
		}
	}
}

// OnReload subscribers run after each applied policy, with it in force, and
// not after a rejected file; a static Authorizer never calls them.
func TestOnReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	testpki.WriteFile(t, path, []byte(policyYAML))
	a, err := Load(path, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var calls []bool // whether the trainer could append when called
	unregister := a.OnReload(func() { calls = append(calls, a.Authorize(trainerA, Append, "team-a/run1") == nil) })
	testpki.WriteFile(t, path, []byte(strings.Replace(policyYAML, "verbs: [append, get, scan]", "verbs: [get]", 1)))
	a.Check()
	testpki.WriteFile(t, path, []byte("grants: []\n"))
	a.Check() // rejected
	unregister()
	testpki.WriteFile(t, path, []byte(policyYAML))
	a.Check()
	if len(calls) != 1 || calls[0] {
		t.Errorf("subscriber calls %v, want one, with the append already revoked", calls)
	}
	NewStatic(&Policy{}).OnReload(func() { t.Error("a static authorizer reloaded") })()
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(policyYAML))
	f.Add([]byte(policyJSON))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses, grants only what its prefixes cover: no
		// identity may touch a shard outside every prefix it was given.
		for _, id := range p.Identities() {
			for _, v := range Verbs {
				for _, prefix := range p.grants[id][v] {
					if prefix != AllShards && p.Allows(id, v, prefix+"x") && !p.Allows(id, v, AllShards) {
						allowedElsewhere := false
						for _, other := range p.grants[id][v] {
							if validate.Covers(other, prefix+"x") {
								allowedElsewhere = true
							}
						}
						if !allowedElsewhere {
							t.Errorf("%q %s %q allowed by no prefix", id, v, prefix+"x")
						}
					}
				}
			}
		}
	})
}

// HasAnyGrant is true exactly for the identities that some call is allowed
// to: a server may refuse the others before reading their requests.
func TestHasAnyGrant(t *testing.T) {
	p, err := Parse([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	a := NewStatic(p)
	for _, id := range []string{trainerA, readerB, admin, "spiffe://cluster.local/ns/team-c/sa/x", ""} {
		allowed := false
		for _, v := range Verbs {
			for _, s := range []string{"team-a", "team-a/eval", "team-b", "team-c"} {
				allowed = allowed || a.Authorize(id, v, s) == nil
			}
		}
		if got := a.HasAnyGrant(id); got != allowed {
			t.Errorf("HasAnyGrant(%q) = %v, but some call allowed: %v", id, got, allowed)
		}
	}
	if !NewStatic(p).HasAnyGrant(trainerA) || NewStatic(&Policy{}).HasAnyGrant(trainerA) {
		t.Error("HasAnyGrant must follow the policy in force")
	}
}

// The lifecycle verbs are granted by name only: no other verb implies
// delete (or list, or describe), and default-deny holds for each.
func TestLifecycleVerbs(t *testing.T) {
	p, err := Parse([]byte("grants:\n  - identities: [dns:w.example]\n    shardPrefixes: [team-a]\n    verbs: [append, get, scan, list, describe]\n  - identities: [dns:ops.example]\n    shardPrefixes: [team-a/exp]\n    verbs: [delete]\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := NewStatic(p)
	for _, v := range []Verb{List, Describe} {
		if err := a.Authorize("dns:w.example", v, "team-a/x"); err != nil {
			t.Errorf("%s allowed by its grant: %v", v, err)
		}
		if err := a.Authorize("dns:w.example", v, "team-b/x"); !errors.Is(err, ErrDenied) {
			t.Errorf("%s outside the grant: %v, want denied", v, err)
		}
	}
	if err := a.Authorize("dns:w.example", Delete, "team-a/x"); !errors.Is(err, ErrDenied) {
		t.Errorf("delete implied by the other verbs: %v", err)
	}
	if err := a.Authorize("dns:ops.example", Delete, "team-a/exp/1"); err != nil {
		t.Errorf("delete by its grant: %v", err)
	}
	for _, v := range []Verb{Get, List, Describe} {
		if err := a.Authorize("dns:ops.example", v, "team-a/exp/1"); !errors.Is(err, ErrDenied) {
			t.Errorf("delete implies %s: %v", v, err)
		}
	}
	if !a.AllowsAny("dns:w.example", List) || a.AllowsAny("dns:ops.example", List) || a.AllowsAny("dns:nobody", Delete) {
		t.Error("AllowsAny does not follow the grants")
	}
	if !a.Allows("dns:w.example", List, "team-a") || a.Allows("dns:w.example", List, "team-ab") {
		t.Error("Allows does not cover on whole segments")
	}
}

// A consumer's positions are the whole prefix's: consume (and scan, for
// describing) must be granted on the prefix itself, so team-a cannot touch
// team-b's consumers, nor the consumers of every shard.
func TestAuthorizePrefix(t *testing.T) {
	p, err := Parse([]byte(`grants:
  - identities: ["uri:spiffe://x/team-a"]
    shardPrefixes: ["team-a"]
    verbs: [consume, scan]
  - identities: ["uri:spiffe://x/ops"]
    shardPrefixes: ["*"]
    verbs: [consume]
`))
	if err != nil {
		t.Fatal(err)
	}
	a := NewStatic(p)
	for _, tc := range []struct {
		identity string
		verb     Verb
		prefix   string
		ok       bool
	}{
		{"uri:spiffe://x/team-a", Consume, "team-a", true},
		{"uri:spiffe://x/team-a", Consume, "team-a/", true},
		{"uri:spiffe://x/team-a", Consume, "team-a/exp", true},
		{"uri:spiffe://x/team-a", Scan, "team-a/exp", true},
		{"uri:spiffe://x/team-a", Consume, "team-b", false},
		{"uri:spiffe://x/team-a", Consume, "team-ab", false},
		{"uri:spiffe://x/team-a", Consume, "", false},
		{"uri:spiffe://x/team-a", Append, "team-a", false},
		{"uri:spiffe://x/ops", Consume, "", true},
		{"uri:spiffe://x/ops", Consume, "team-b/x", true},
		{"uri:spiffe://x/ops", Scan, "team-b", false},
		{"", Consume, "team-a", false},
	} {
		err := a.AuthorizePrefix(tc.identity, tc.verb, tc.prefix)
		if (err == nil) != tc.ok {
			t.Errorf("AuthorizePrefix(%q, %s, %q) = %v, want allowed %t", tc.identity, tc.verb, tc.prefix, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrDenied) {
			t.Errorf("AuthorizePrefix(%q, %s, %q) = %v, want ErrDenied", tc.identity, tc.verb, tc.prefix, err)
		}
	}
	if err := a.AuthorizePrefix("uri:spiffe://x/team-a", Consume, "Team-A"); err == nil || errors.Is(err, ErrDenied) {
		t.Errorf("an invalid prefix: %v, want the validation error", err)
	}
}
