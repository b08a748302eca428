package duckdb

import "testing"

func TestQuery(t *testing.T) {
	rows := Query(t, "SELECT 42 AS answer, [1, 2] AS l, MAP {'k': 'v'} AS m")
	if len(rows) != 1 || rows[0]["answer"] != float64(42) {
		t.Fatalf("rows: %v", rows)
	}
}

func TestInstalledVersionMatchesPin(t *testing.T) {
	dir, err := ensureInstalled()
	if err != nil {
		t.Fatal(err)
	}
	want, err := npmPackage.Pinned(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := npmPackage.Installed(dir); got != want {
		t.Fatalf("installed %s, pinned %s", got, want)
	}
}
