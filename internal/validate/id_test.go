package validate

import (
	"regexp"
	"strings"
	"testing"
)

func TestRecordID(t *testing.T) {
	tests := []struct {
		id   string
		rule string // "" means valid
	}{
		{"a", ""},
		{"0192f1c4-7d3e-7a8b-9c0d-1e2f3a4b5c6d", ""},
		{"rollout:42.turn_3-B", ""},
		{"..", ""},
		{strings.Repeat("Z", 128), ""},

		{"", "required"},
		{strings.Repeat("Z", 129), "must be at most 128 characters"},
		{"a/b", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
		{"a b", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
		{"ü", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
		{"a\x00", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
		{`a\b`, "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
		{"a+b", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
	}
	for _, tt := range tests {
		err := RecordID(tt.id)
		if tt.rule == "" {
			if err != nil {
				t.Errorf("RecordID(%q) = %v, want nil", tt.id, err)
			}
			continue
		}
		checkFieldError(t, "RecordID("+quote(tt.id)+")", err, "id", tt.rule)
	}
	const want = `id: must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-', got "/" at byte 1`
	if err := RecordID("a/b"); err == nil || err.Error() != want {
		t.Errorf("RecordID(%q) = %v, want %s", "a/b", err, want)
	}
}

var recordIDOracle = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// FuzzRecordID checks that the validator agrees with the grammar and that
// every rejection is a typed error.
func FuzzRecordID(f *testing.F) {
	for _, s := range []string{
		"", "a", "..", "a/b", "A:b.c_d-e", "ü", "a\x00", "\xff", " ",
		strings.Repeat("x", 128), strings.Repeat("x", 129),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := RecordID(id)
		if want := recordIDOracle.MatchString(id); (err == nil) != want {
			t.Fatalf("RecordID(%q) = %v, grammar says valid=%v", id, err, want)
		}
		if err != nil {
			checkFieldError(t, "RecordID("+quote(id)+")", err, "id", "")
		}
	})
}

func TestRequestID(t *testing.T) {
	for _, id := range []string{"", "7d417461-261f-4244-9e13-d7c71483cd59", "job-7:step.12_a", strings.Repeat("r", 128)} {
		if err := RequestID(id); err != nil {
			t.Errorf("RequestID(%q) = %v, want nil", id, err)
		}
	}
	for _, tt := range []struct{ id, rule string }{
		{strings.Repeat("r", 129), "must be at most 128 characters"},
		{"a/b", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
		{"a b", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
	} {
		checkFieldError(t, "RequestID("+quote(tt.id)+")", RequestID(tt.id), "request_id", tt.rule)
	}
}
