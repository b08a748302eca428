// Package authz decides which client identity may do what to which shards.
//
// A Policy maps identities (from client certificates, see Identity) to shard
// prefixes and verbs. It is default-deny: a call is allowed only when a
// grant names the caller's identity, the verb, and a prefix that covers the
// shard on whole path segments ("team-a" covers "team-a" and "team-a/run1",
// never "team-ab"). An Authorizer holds the policy in force and reloads it
// from its file on change; a file that does not parse or validate is
// rejected and the policy in force stays, so a bad edit never opens access.
package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rolloutd/rolloutd/internal/validate"
)

// Verb is what a call does to a shard.
type Verb string

// The verbs a grant can allow. Adding a verb is one line here (and, in the
// server, the RPC it authorizes): parsing, validation and the messages
// follow from Verbs.
var (
	Append = defineVerb("append", "append to")
	Get    = defineVerb("get", "get from")
	Scan   = defineVerb("scan", "scan")
	// List sees a shard in ListShards. A caller lists only the shards its
	// list grants cover; the others are left out of the pages.
	List = defineVerb("list", "list")
	// Describe reads a shard's summary (DescribeShard).
	Describe = defineVerb("describe", "describe")
	// Delete deletes a shard (DeleteShard). No other verb implies it, and
	// no verb is implied by another: each is granted by name.
	Delete = defineVerb("delete", "delete")
	// Consume commits, resets and deletes the stored positions of the
	// consumers of a shard prefix (CommitConsumer, ResetConsumer,
	// DeleteConsumer). It is checked on the consumer's whole prefix: a
	// grant of "team-a" allows the consumers of "team-a" and
	// "team-a/exp", never those of "" (every shard), which need "*".
	// Reading the records, and describing and listing consumers, is scan.
	Consume = defineVerb("consume", "commit, reset or delete the consumers of")
)

// Verbs are all verbs, in the order they were defined. Do not modify it.
var Verbs []Verb

// verbPhrases is how each verb reads before "shard" in a refusal.
var verbPhrases = map[Verb]string{}

// defineVerb adds a verb named name to Verbs; phrase is how it reads
// before "shard" ("append to shard x").
func defineVerb(name, phrase string) Verb {
	v := Verb(name)
	if _, dup := verbPhrases[v]; dup || name == "" {
		panic("authz: verb " + name + " defined twice or empty")
	}
	Verbs = append(Verbs, v)
	verbPhrases[v] = phrase
	return v
}

// VerbList is the verbs as a list for a message or a help text, "append,
// get, ... or delete", built from Verbs.
func VerbList() string {
	names := make([]string, len(Verbs))
	for i, v := range Verbs {
		names[i] = string(v)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// AllShards is the prefix that covers every shard.
const AllShards = validate.AllShards

// File is the policy file's format, YAML or JSON:
//
//	grants:
//	  - identities: ["spiffe://cluster.local/ns/team-a/sa/trainer"]
//	    shardPrefixes: ["team-a"]
//	    verbs: [append, get, scan]
//	  - identities: ["dns:eval-reader.team-b.example", "cn:Legacy Reader"]
//	    shardPrefixes: ["team-a/eval", "team-b"]
//	    verbs: [get, scan]
type File struct {
	Grants []FileGrant `yaml:"grants" json:"grants"`
}

// FileGrant allows each of Identities to do each of Verbs on every shard
// that one of ShardPrefixes covers.
type FileGrant struct {
	// Identities are matched exactly against the client certificate's
	// tagged identity (see Identity), after ParseIdentity: "uri:…",
	// "dns:…", "cn:…", or untagged, where a URI with a scheme means uri:
	// and a DNS name means dns:. A common name is matched only when
	// tagged cn:.
	Identities []string `yaml:"identities" json:"identities"`
	// ShardPrefixes cover shards on whole '/'-separated segments: "team-a"
	// (or "team-a/") covers "team-a" and "team-a/anything", not "team-ab".
	// "*" covers every shard.
	ShardPrefixes []string `yaml:"shardPrefixes" json:"shardPrefixes"`
	// Verbs are among Verbs: append, get, scan, list, describe, delete,
	// consume.
	Verbs []Verb `yaml:"verbs" json:"verbs"`
}

// Policy is a validated, compiled policy. The zero Policy denies
// everything.
type Policy struct {
	// grants: tagged identity → verb → shard prefixes.
	grants map[string]map[Verb][]string
}

// ErrInvalidPolicy wraps every reason a policy is rejected.
var ErrInvalidPolicy = errors.New("invalid authorization policy")

// Parse parses and validates a policy file: JSON when its first non-space
// byte is '{', YAML otherwise. Unknown fields, unknown verbs, invalid
// prefixes, empty lists and an empty file are errors.
func Parse(data []byte) (*Policy, error) {
	var f File
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrInvalidPolicy)
	}
	if trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%w: JSON: %v", ErrInvalidPolicy, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("%w: JSON: data after the policy object", ErrInvalidPolicy)
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%w: YAML: %v", ErrInvalidPolicy, err)
		}
		var extra any
		if err := dec.Decode(&extra); err != io.EOF {
			return nil, fmt.Errorf("%w: YAML: more than one document", ErrInvalidPolicy)
		}
	}
	return Compile(f)
}

// Compile validates f and compiles it into a Policy.
func Compile(f File) (*Policy, error) {
	if len(f.Grants) == 0 {
		return nil, fmt.Errorf("%w: no grants (a policy that allows nothing is almost certainly a truncated file)", ErrInvalidPolicy)
	}
	p := &Policy{grants: map[string]map[Verb][]string{}}
	for i, g := range f.Grants {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: grants[%d]: %s", ErrInvalidPolicy, i, fmt.Sprintf(format, args...))
		}
		if len(g.Identities) == 0 || len(g.ShardPrefixes) == 0 || len(g.Verbs) == 0 {
			return nil, bad("identities, shardPrefixes and verbs must each list at least one entry")
		}
		prefixes := make([]string, 0, len(g.ShardPrefixes))
		for _, sp := range g.ShardPrefixes {
			norm, err := normalizePrefix(sp)
			if err != nil {
				return nil, bad("shard prefix %q: %v", sp, err)
			}
			prefixes = append(prefixes, norm)
		}
		for _, v := range g.Verbs {
			if !slices.Contains(Verbs, v) {
				return nil, bad("unknown verb %q (want %s)", v, VerbList())
			}
		}
		for _, raw := range g.Identities {
			id, err := ParseIdentity(raw)
			if err != nil {
				return nil, bad("%v", err)
			}
			byVerb := p.grants[id]
			if byVerb == nil {
				byVerb = map[Verb][]string{}
				p.grants[id] = byVerb
			}
			for _, v := range g.Verbs {
				for _, sp := range prefixes {
					if !slices.Contains(byVerb[v], sp) {
						byVerb[v] = append(byVerb[v], sp)
					}
				}
			}
		}
	}
	return p, nil
}

// normalizePrefix checks a shard prefix: "*", or a valid shard name with an
// optional trailing '/', which it drops.
func normalizePrefix(s string) (string, error) {
	if s == AllShards {
		return s, nil
	}
	trimmed := strings.TrimSuffix(s, "/")
	if err := validate.Shard(trimmed); err != nil {
		return "", fmt.Errorf("not a shard name or %q: %v", AllShards, err)
	}
	return trimmed, nil
}

// Allows reports whether identity, in its tagged form (see Identity), may do
// verb on shard. It does not check that shard is a valid name;
// Authorizer.Authorize does.
func (p *Policy) Allows(identity string, verb Verb, shard string) bool {
	if p == nil || identity == "" {
		return false
	}
	for _, prefix := range p.grants[identity][verb] {
		if validate.Covers(prefix, shard) {
			return true
		}
	}
	return false
}

// AllowsAny reports whether identity may do verb on some shard: the
// policy has a grant of verb for it.
func (p *Policy) AllowsAny(identity string, verb Verb) bool {
	return p != nil && identity != "" && len(p.grants[identity][verb]) > 0
}

// Prefixes returns the shard prefixes (AllShards for all) of identity's
// grants of verb, so that a listing can stay inside them.
func (p *Policy) Prefixes(identity string, verb Verb) []string {
	if p == nil || identity == "" {
		return nil
	}
	return slices.Clone(p.grants[identity][verb])
}

// cnHint explains a refusal of a common-name identity whose value the
// policy grants as a DNS or URI SAN: an untagged name in a policy that once
// matched a certificate's CN no longer does. "" otherwise.
func (p *Policy) cnHint(identity string) string {
	v, ok := strings.CutPrefix(identity, KindCN+":")
	if !ok || p == nil {
		return ""
	}
	for _, kind := range []string{KindDNS, KindURI} {
		if other := kind + ":" + v; p.grants[other] != nil {
			return fmt.Sprintf("the policy grants %q, a certificate SAN; a common name counts only where the policy names it %q", other, identity)
		}
	}
	return ""
}

// Identities lists the identities that have grants, tagged, sorted.
func (p *Policy) Identities() []string {
	ids := make([]string, 0, len(p.grants))
	for id := range p.grants {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
