package main

// version is the release this binary was built from, stamped at build time
// with -ldflags "-X main.version=..." (see the Dockerfile); "dev" otherwise.
var version = "dev"
