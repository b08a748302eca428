package validate

import (
	"errors"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestShard(t *testing.T) {
	seg63 := strings.Repeat("a", 63)
	long := seg63 + "/" + seg63 + "/" + seg63 + "/" + seg63 // 255 bytes
	tests := []struct {
		shard string
		rule  string // "" means valid
	}{
		{"a", ""},
		{"0", ""},
		{"exp-42", ""},
		{"exp-42/actor-7", ""},
		{"a/b/c/d", ""},
		{"a.b_c-d", ""},
		{"a..", ""},
		{"v1.0/run_3", ""},
		{seg63, ""},
		{long, ""},

		{"", "required"},
		{long + "a", "must be at most 255 bytes"},
		{"a/b/c/d/e", "must have 1 to 4 segments separated by '/'"},
		{"/a", "segments must not be empty"},
		{"a/", "segments must not be empty"},
		{"a//b", "segments must not be empty"},
		{"/", "segments must not be empty"},
		{seg63 + "a", "segments must be at most 63 characters"},
		{"a/" + seg63 + "b", "segments must be at most 63 characters"},
		{".", "segments must start with a lowercase letter or digit"},
		{"..", "segments must start with a lowercase letter or digit"},
		{"a/../b", "segments must start with a lowercase letter or digit"},
		{"a/./b", "segments must start with a lowercase letter or digit"},
		{".hidden", "segments must start with a lowercase letter or digit"},
		{"_x", "segments must start with a lowercase letter or digit"},
		{"a/-x", "segments must start with a lowercase letter or digit"},
		{"Exp", "must contain only a-z, 0-9, '.', '_', '-' and '/' between segments"},
		{"é", "must contain only a-z, 0-9, '.', '_', '-' and '/' between segments"},
		{"a b", "must contain only a-z, 0-9, '.', '_', '-' and '/' between segments"},
		{`a\b`, "must contain only a-z, 0-9, '.', '_', '-' and '/' between segments"},
		{"a:b", "must contain only a-z, 0-9, '.', '_', '-' and '/' between segments"},
		{"a\x00", "must contain only a-z, 0-9, '.', '_', '-' and '/' between segments"},
		{"\xff", "must contain only a-z, 0-9, '.', '_', '-' and '/' between segments"},
	}
	for _, tt := range tests {
		err := Shard(tt.shard)
		if tt.rule == "" {
			if err != nil {
				t.Errorf("Shard(%q) = %v, want nil", tt.shard, err)
			}
			continue
		}
		checkFieldError(t, "Shard("+quote(tt.shard)+")", err, "shard", tt.rule)
	}
}

func TestShardErrorMessages(t *testing.T) {
	tests := []struct {
		shard, want string
	}{
		{"", "shard: required"},
		{"a/../b", `shard: segments must start with a lowercase letter or digit, segment 2 starts with "."`},
		{"exp/Run", `shard: must contain only a-z, 0-9, '.', '_', '-' and '/' between segments, got "R" at byte 4`},
		{"é", `shard: must contain only a-z, 0-9, '.', '_', '-' and '/' between segments, got "\xc3" at byte 0`},
		{"a/", "shard: segments must not be empty, segment 2 is empty (leading, trailing or doubled '/')"},
	}
	for _, tt := range tests {
		if err := Shard(tt.shard); err == nil || err.Error() != tt.want {
			t.Errorf("Shard(%q) = %v, want %s", tt.shard, err, tt.want)
		}
	}
}

// shardOracle is the shard grammar as a regular expression, to check the
// hand-written validator against.
var shardOracle = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}(/[a-z0-9][a-z0-9._-]{0,62}){0,3}$`)

// FuzzShard checks that the validator agrees with the grammar, that every
// rejection is a typed error, and that an accepted shard used as a blob
// prefix cannot escape it.
func FuzzShard(f *testing.F) {
	for _, s := range []string{
		"", "a", "exp-42/actor-7", "a/b/c/d", "a/b/c/d/e", "a..", "..", ".", "/", "//",
		"/a", "a/", "a//b", "a/../b", "a/./b", "../a", "a/..", "A", "é", "a\x00b", `a\b`,
		"a%2f..", "shards", "a/manifest", strings.Repeat("a", 63), strings.Repeat("a", 64),
		strings.Repeat("a/", 127) + "a", strings.Repeat("abc/", 3) + strings.Repeat("z", 63),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := Shard(s)
		want := len(s) <= MaxShardBytes && shardOracle.MatchString(s)
		if (err == nil) != want {
			t.Fatalf("Shard(%q) = %v, grammar says valid=%v", s, err, want)
		}
		if err != nil {
			checkFieldError(t, "Shard("+quote(s)+")", err, "shard", "")
			return
		}
		// The blob-prefix invariant: the shard maps to a clean name under
		// "shards/<shard>/", and nothing outside it.
		name := "shards/" + s + "/manifest"
		if c := path.Clean(name); c != name {
			t.Fatalf("Shard(%q) accepted, but blob name %q cleans to %q", s, name, c)
		}
		if !strings.HasPrefix(path.Clean(name), "shards/"+s+"/") {
			t.Fatalf("Shard(%q) accepted, but blob name %q leaves its prefix", s, name)
		}
		for _, seg := range strings.Split(s, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("Shard(%q) accepted with segment %q", s, seg)
			}
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c >= 0x80 || 'A' <= c && c <= 'Z' {
				t.Fatalf("Shard(%q) accepted with byte %q at %d", s, c, i)
			}
		}
	})
}

// checkFieldError fails unless err is a *FieldError for field that matches
// ErrInvalid and, when rule is not empty, broke rule.
func checkFieldError(t *testing.T, call string, err error, field, rule string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s = nil, want %s: %s", call, field, rule)
		return
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("%s = %v, does not match ErrInvalid", call, err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Errorf("%s = %v (%T), want a *FieldError", call, err, err)
		return
	}
	if fe.Field != field || (rule != "" && fe.Rule != rule) {
		t.Errorf("%s = %v, want field %q rule %q", call, err, field, rule)
	}
	if !strings.HasPrefix(err.Error(), fe.Field+": "+fe.Rule) {
		t.Errorf("%s: Error() = %q does not start with field and rule", call, err.Error())
	}
}

func quote(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return strconv.Quote(s)
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		scope, shard string
		want         bool
	}{
		{"", "team-a", true},
		{"", "team-a/run1", true},
		{AllShards, "team-a/run1", true},
		{"team-a", "team-a", true},
		{"team-a", "team-a/run1", true},
		{"team-a", "team-a/run1/x", true},
		{"team-a/run1", "team-a/run1", true},
		{"team-a", "team-ab", false},
		{"team-a", "team-ab/run1", false},
		{"team-a", "team", false},
		{"team-a/run1", "team-a", false},
		{"team-a/run1", "team-a/run10", false},
		{"team-b", "team-a/run1", false},
		{"team-a", "", false},
	} {
		if got := Covers(c.scope, c.shard); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.scope, c.shard, got, c.want)
		}
	}
}
