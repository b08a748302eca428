package validate

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The shard-name rules written for people (the README and the Python
// client's README) state Shard's limits and examples that hold.
func TestShardRulesInTheDocs(t *testing.T) {
	valid := []string{"exp-42/actor-7", "team-a/run.3/rank_0"}
	invalid := []string{"Exp-42", "exp 42", "/exp-42", "exp-42/_x"}
	for _, s := range valid {
		if err := Shard(s); err != nil {
			t.Errorf("the docs call %q a shard: %v", s, err)
		}
	}
	for _, s := range invalid {
		if Shard(s) == nil {
			t.Errorf("the docs say %q is not a shard, but Shard accepts it", s)
		}
	}
	rule := fmt.Sprintf("1 to %d segments separated by `/`; each segment is 1 to %d characters of\n"+
		"lowercase `a-z`, digits `0-9`, `.`, `_` and `-`, and starts with a letter or digit",
		MaxShardSegments, MaxSegmentBytes)
	whole := fmt.Sprintf("at most %d\n", MaxShardBytes)
	for _, doc := range []string{"../../README.md", "../../clients/python/README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		// Line breaks and list indentation are the docs' own.
		text := strings.ReplaceAll(string(b), "\n  ", "\n")
		norm := strings.Join(strings.Fields(text), " ")
		for _, want := range []string{rule, whole} {
			if !strings.Contains(norm, strings.Join(strings.Fields(want), " ")) {
				t.Errorf("%s does not state %q", doc, want)
			}
		}
		for _, ex := range append(valid, invalid...) {
			if !strings.Contains(norm, "`"+ex+"`") {
				t.Errorf("%s does not give the example `%s`", doc, ex)
			}
		}
	}
}
