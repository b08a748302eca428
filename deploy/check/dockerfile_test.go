package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/subrequests/lint"
	digest "github.com/opencontainers/go-digest"
)

// stubResolver answers buildkit's image lookups offline with a minimal
// linux/amd64 image config, and records which images were asked for.
type stubResolver struct {
	mu   sync.Mutex
	refs []string
}

func (r *stubResolver) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	r.mu.Lock()
	r.refs = append(r.refs, ref)
	r.mu.Unlock()
	cfg, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{}},
		"config":       map[string]any{"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
	})
	if err != nil {
		return "", "", nil, err
	}
	return ref, digest.FromBytes(cfg), cfg, nil
}

var _ llb.ImageMetaResolver = (*stubResolver)(nil)

// lintDockerfile runs buildkit's own Dockerfile lint rules (what
// `docker build --check` runs) without a daemon or a network.
func lintDockerfile(t *testing.T, name string, dt []byte) (*lint.LintResults, []string) {
	t.Helper()
	ctx := context.Background()
	// The source map stands for the build context the Dockerfile came from,
	// as buildkit's dockerfile frontend sets it up.
	src := llb.Local("dockerfile")
	def, err := src.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	smap := llb.NewSourceMap(&src, name, "Dockerfile", dt)
	smap.Definition = def
	res := &stubResolver{}
	results, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{
		MetaResolver: res,
		SourceMap:    smap,
	})
	if err != nil {
		t.Fatalf("DockerfileLint: %v", err)
	}
	return results, res.refs
}

func formatLint(results *lint.LintResults) string {
	var b bytes.Buffer
	for _, w := range results.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		fmt.Fprintf(&b, "line %d: %s: %s\n", line, w.RuleName, w.Detail)
	}
	if results.Error != nil {
		fmt.Fprintf(&b, "build error: %s\n", results.Error.Message)
	}
	return b.String()
}

// dockerfile is the parsed Dockerfile.
type dockerfile struct {
	stages   []instructions.Stage
	metaArgs []instructions.ArgCommand
}

func parseDockerfile(dt []byte) (*dockerfile, error) {
	res, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		return nil, err
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, err
	}
	return &dockerfile{stages: stages, metaArgs: metaArgs}, nil
}

// stageProblems checks the rules the issue sets beyond lint: every COPY
// --from names an earlier stage; the final stage runs as a non-root USER,
// with no RUN (no shell in the image) and an exec-form ENTRYPOINT; the gRPC
// and metrics ports are EXPOSEd.
func (df *dockerfile) stageProblems(wantPorts ...string) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if len(df.stages) < 2 {
		add("want a multi-stage build, got %d stage(s)", len(df.stages))
	}
	for i, st := range df.stages {
		for _, cmd := range st.Commands {
			c, ok := cmd.(*instructions.CopyCommand)
			if !ok || c.From == "" {
				continue
			}
			found := false
			for j, prev := range df.stages[:i] {
				if strings.EqualFold(prev.Name, c.From) || c.From == strconv.Itoa(j) {
					found = true
				}
			}
			if !found {
				add("stage %d: COPY --from=%s names no earlier stage", i, c.From)
			}
		}
	}
	if len(df.stages) == 0 {
		return append(out, "no stages")
	}
	final := df.stages[len(df.stages)-1]
	user, entrypoint := "", (*instructions.EntrypointCommand)(nil)
	var exposed []string
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			entrypoint = c
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.RunCommand:
			add("final stage: RUN %s needs a shell; the final image must have none", strings.Join(c.CmdLine, " "))
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	switch {
	case user == "":
		add("final stage: no USER; the image would run as its base's user (root unless the base says otherwise)")
	case uid == "root" || uid == "0":
		add("final stage: USER %s is root", user)
	case strings.Trim(uid, "0123456789") != "":
		add("final stage: USER %s is not numeric; Kubernetes' runAsNonRoot can only verify a numeric uid", user)
	}
	if entrypoint == nil {
		add("final stage: no ENTRYPOINT")
	} else if entrypoint.PrependShell {
		add("final stage: ENTRYPOINT is in shell form; use the exec form [\"/rolloutd\"] (there is no shell)")
	}
	for _, p := range wantPorts {
		if !slices.Contains(exposed, p) && !slices.Contains(exposed, p+"/tcp") {
			add("final stage: port %s is not EXPOSEd (EXPOSE %v)", p, exposed)
		}
	}
	return out
}

func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	dt, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return dt
}

// TestDockerfileLint runs Docker's own lint rules on the Dockerfile, offline.
func TestDockerfileLint(t *testing.T) {
	dt := readRepoFile(t, "Dockerfile")
	results, refs := lintDockerfile(t, "Dockerfile", dt)
	if len(results.Warnings) > 0 || results.Error != nil {
		t.Fatalf("Dockerfile does not pass buildkit's lint rules:\n%s", formatLint(results))
	}
	if len(refs) == 0 {
		t.Fatal("the lint resolved no base image; the stub MetaResolver was not used")
	}
	t.Logf("buildkit lint: 0 warnings, no build error; base images resolved (stubbed): %v", refs)
}

// TestDockerfileStages checks the stages: the builder, the final distroless
// :nonroot stage, USER, ENTRYPOINT, EXPOSE and every COPY --from.
func TestDockerfileStages(t *testing.T) {
	df, err := parseDockerfile(readRepoFile(t, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	_, b := renderOnDisk(t, "base")
	c := rolloutdContainer(t, b)
	var ports []string
	for _, p := range c.Ports {
		ports = append(ports, strconv.Itoa(int(p.ContainerPort)))
	}
	for _, p := range df.stageProblems(ports...) {
		t.Error(p)
	}

	build, final := df.stages[0], df.stages[len(df.stages)-1]
	args := map[string]string{}
	for _, a := range df.metaArgs {
		for _, kv := range a.Args {
			args[kv.Key] = kv.ValueString()
		}
	}
	base := os.Expand(build.BaseName, func(k string) string { return args[k] })
	if !strings.HasPrefix(base, "golang:1.26") {
		t.Errorf("builder stage FROM %s (%s), want golang:1.26", build.BaseName, base)
	}
	if !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") || !strings.HasSuffix(final.BaseName, ":nonroot") {
		t.Errorf("final stage FROM %s, want distroless static :nonroot", final.BaseName)
	}
	run := buildRun(t, df)
	for _, want := range []string{"go build", "-trimpath", "-ldflags", "./cmd/rolloutd"} {
		if !strings.Contains(run, want) {
			t.Errorf("the build RUN %q lacks %q", run, want)
		}
	}
	// The linker ignores -X for a variable that does not exist, so stamp
	// main.version exactly when cmd/rolloutd declares it.
	const stamp = "-X main.version=${VERSION}"
	switch has := mainDeclaresVersion(t); {
	case has && !strings.Contains(run, stamp):
		t.Errorf("cmd/rolloutd declares version, but the build RUN does not stamp it with %s", stamp)
	case !has && strings.Contains(run, "main.version"):
		t.Errorf("the build RUN stamps main.version, which cmd/rolloutd does not declare (the linker would silently ignore it)")
	case !has:
		t.Logf("note: cmd/rolloutd declares no version variable; the image carries the version only as its org.opencontainers.image.version label")
	}
	labelled := false
	for _, cmd := range final.Commands {
		if l, ok := cmd.(*instructions.LabelCommand); ok {
			for _, kv := range l.Labels {
				labelled = labelled || (kv.Key == "org.opencontainers.image.version" && strings.Contains(kv.Value, "${VERSION}"))
			}
		}
	}
	if !labelled {
		t.Error("the final stage lacks LABEL org.opencontainers.image.version=\"${VERSION}\"")
	}
	if env := stageEnv(build); env["CGO_ENABLED"] != "0" {
		t.Errorf("builder stage ENV CGO_ENABLED=%q, want 0", env["CGO_ENABLED"])
	}
	t.Logf("stages: %s (FROM %s) -> final FROM %s; build: %s", build.Name, base, final.BaseName, run)
}

// TestDockerfileChecksCatchMistakes feeds a broken Dockerfile to the same
// checks: buildkit's lint and the stage rules must both object.
func TestDockerfileChecksCatchMistakes(t *testing.T) {
	dt := readRepoFile(t, filepath.Join("deploy", "check", "testdata", "bad.Dockerfile"))
	results, _ := lintDockerfile(t, "bad.Dockerfile", dt)
	got := formatLint(results)
	t.Logf("buildkit lint on testdata/bad.Dockerfile:\n%s", got)
	for _, rule := range []string{"FromAsCasing", "JSONArgsRecommended"} {
		if !strings.Contains(got, rule) {
			t.Errorf("lint did not report %s", rule)
		}
	}
	df, err := parseDockerfile(dt)
	if err != nil {
		t.Fatal(err)
	}
	problems := df.stageProblems("50051", "9090")
	t.Logf("stage rules on testdata/bad.Dockerfile:\n%s", strings.Join(problems, "\n"))
	for _, want := range []string{"COPY --from=bulid names no earlier stage", "USER root is root",
		"ENTRYPOINT is in shell form", "port 9090 is not EXPOSEd", "RUN"} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no stage problem containing %q", want)
		}
	}
}

// mainDeclaresVersion reports whether package main of cmd/rolloutd declares
// a package-level variable named version.
func mainDeclaresVersion(t *testing.T) bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(repoRoot, "cmd", "rolloutd", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in cmd/rolloutd (%v)", err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(fset, name, nil, goparser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if n.Name == "version" {
						return true
					}
				}
			}
		}
	}
	return false
}

// buildRun is the builder stage's RUN line that runs go build.
func buildRun(t *testing.T, df *dockerfile) string {
	t.Helper()
	for _, cmd := range df.stages[0].Commands {
		if r, ok := cmd.(*instructions.RunCommand); ok && strings.Contains(strings.Join(r.CmdLine, " "), "go build") {
			if !r.PrependShell {
				t.Fatal("the go build RUN is in exec form; the test runs it with sh -c")
			}
			return strings.Join(r.CmdLine, " ")
		}
	}
	t.Fatal("no RUN with go build in the first stage")
	return ""
}

// stageEnv collects a stage's ENV and ARG defaults.
func stageEnv(st instructions.Stage) map[string]string {
	env := map[string]string{}
	for _, cmd := range st.Commands {
		switch c := cmd.(type) {
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				env[kv.Key] = kv.Value
			}
		case *instructions.ArgCommand:
			for _, kv := range c.Args {
				env[kv.Key] = kv.ValueString()
			}
		case *instructions.WorkdirCommand:
			env["__WORKDIR"] = c.Path
		}
	}
	return env
}
