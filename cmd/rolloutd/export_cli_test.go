package main

import (
	"io"
	"strings"
	"testing"
)

// TestExportFlags: each mistake in export's flags fails before any I/O,
// with a message naming the flag.
func TestExportFlags(t *testing.T) {
	env := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want string // "" means valid
	}{
		{[]string{"--store", "d", "--prefix", "", "--out", "o"}, ""},
		{[]string{"--server", "h:1", "--shard", "a/b", "--prefix", "a/", "--out", "o", "--tls-ca", "ca.crt"}, ""},
		{[]string{"--prefix", "", "--out", "o"}, "--store"},
		{[]string{"--store", "d", "--server", "h:1", "--prefix", "", "--out", "o"}, "--store"},
		{[]string{"--server", "h:1", "--prefix", "", "--out", "o"}, ""},
		{[]string{"--store", "d", "--shard", "x", "--prefix", "", "--out", "o"}, "--shard"},
		// No --prefix is every shard; --shard needs none.
		{[]string{"--store", "d", "--out", "o"}, ""},
		{[]string{"--server", "h:1", "--shard", "x", "--out", "o"}, ""},
		{[]string{"--server", "h:1", "--shard", "x", "--prefix", "mine", "--out", "o"}, `--shard "x" is not under --prefix "mine"`},
		{[]string{"--server", "h:1", "--shard", "mine/x", "--prefix", "mine", "--out", "o"}, ""},
		{[]string{"--server", "h:1", "--shard", "minex", "--prefix", "mine", "--out", "o"}, "not under --prefix"},
		{[]string{"--server", "h:1", "--shard", "No", "--out", "o"}, `--shard "No"`},
		{[]string{"--store", "d", "--prefix", "*", "--out", "o"}, "omit --prefix to export every shard"},
		{[]string{"--store", "d", "--prefix", "De", "--out", "o"}, "whole '/'-separated segments"},
		{[]string{"--store", "d", "--prefix", ""}, "--out"},
		{[]string{"--store", "d", "--prefix", "", "--out", "o", "--rows-per-file", "0"}, "--rows-per-file"},
		{[]string{"--store", "d", "--prefix", "", "--out", "o", "--compression", "gzip"}, "--compression"},
		{[]string{"--store", "d", "--prefix", "", "--out", "o", "extra"}, "unexpected argument"},
	} {
		_, err := parseExportConfig(tc.args, env, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// ROLLOUTD_ADDR is export's --server when neither --store nor --server is
// given; either flag wins over it.
func TestExportServerFromEnv(t *testing.T) {
	env := func(k string) string {
		if k == "ROLLOUTD_ADDR" {
			return "rolloutd:50051"
		}
		return ""
	}
	for _, tc := range []struct {
		args              []string
		wantServer, store string
	}{
		{[]string{"--prefix", "", "--out", "o"}, "rolloutd:50051", ""},
		{[]string{"--server", "h:1", "--prefix", "", "--out", "o"}, "h:1", ""},
		{[]string{"--store", "d", "--prefix", "", "--out", "o"}, "", "d"},
	} {
		c, err := parseExportConfig(tc.args, env, io.Discard)
		if err != nil || c.Server != tc.wantServer || c.Store != tc.store {
			t.Errorf("%q with ROLLOUTD_ADDR set: %+v, %v; want --server %q, --store %q", tc.args, c, err, tc.wantServer, tc.store)
		}
	}
}
