package main

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// TestExportNeverCreatesItsSourceContainer exports from an azblob:// store
// whose container does not exist: export fails, saying so, and the source
// account has no such container afterwards.
func TestExportNeverCreatesItsSourceContainer(t *testing.T) {
	env, store := azureEnv(t)
	_, stderr, err := runExportCmd(t, env, "--store", store, "--prefix", "", "--out", t.TempDir())
	if err == nil || !strings.Contains(stderr, "does not exist") {
		t.Errorf("export from a missing container: err %v, stderr:\n%s\nwant a failure saying it does not exist", err, stderr)
	}
	c, err := container.NewClientFromConnectionString(az.ConnectionString, strings.TrimPrefix(store, "azblob://"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetProperties(context.Background(), nil)
	if !bloberror.HasCode(err, bloberror.ContainerNotFound) {
		t.Fatalf("the source container after the export: GetProperties = %v; want ContainerNotFound (export created it)", err)
	}
}
