package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// TestGeneratedCodeIsUpToDate regenerates client/reasons_gen.go and compares
// it with the committed file: a reason added to (or changed in) the enum
// without `go generate ./client` fails here.
func TestGeneratedCodeIsUpToDate(t *testing.T) {
	want, err := generate(rolloutv1.ErrorReason(0).Descriptor())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "..", output)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what reasonsgen writes; run go generate ./client\ncommitted:\n%s\ngenerated:\n%s", path, got, want)
	}
}

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{
		"OUTCOME_UNKNOWN":  "OutcomeUnknown",
		"TOO_LARGE":        "TooLarge",
		"SCAN_INTERRUPTED": "ScanInterrupted",
		"A__B":             "AB",
	} {
		if got := camel(in); got != want {
			t.Errorf("camel(%q) = %q, want %q", in, got, want)
		}
	}
}
