package check

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// imageBuild is the result of running the Dockerfile's build stage.
var imageBuild struct {
	once       sync.Once
	dir        string // removed by TestMain
	bin        string
	entrypoint []string
	err        error
}

// buildImageBinary does what `docker build` does up to the final stage,
// without Docker: it copies the build context filtered by .dockerignore,
// runs every RUN of the build stage there with sh -c and the stage's ENV and
// ARG defaults (the module and build caches stand in for the cache mounts),
// and returns the binary the final stage copies, with the ENTRYPOINT.
func buildImageBinary(t *testing.T) (bin string, entrypoint []string) {
	t.Helper()
	b := &imageBuild
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "rolloutd-image-")
		if b.err != nil {
			return
		}
		b.bin, b.entrypoint, b.err = runBuildStage(t, b.dir)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin, b.entrypoint
}

func runBuildStage(t *testing.T, tmp string) (string, []string, error) {
	df, err := parseDockerfile(readRepoFile(t, "Dockerfile"))
	if err != nil {
		return "", nil, err
	}
	ctxDir := filepath.Join(tmp, "context")
	n, err := copyBuildContext(ctxDir)
	if err != nil {
		return "", nil, err
	}
	build := df.stages[0]
	env := stageEnv(build)
	workdir := env["__WORKDIR"]
	delete(env, "__WORKDIR")
	start := time.Now()
	for _, cmd := range build.Commands {
		r, ok := cmd.(*instructions.RunCommand)
		if !ok {
			continue
		}
		line := strings.Join(r.CmdLine, " ")
		c := exec.Command("sh", "-c", line)
		c.Dir = ctxDir
		c.Env = buildEnv(env)
		out, err := c.CombinedOutput()
		if err != nil {
			return "", nil, fmt.Errorf("Dockerfile RUN %s: %v\n%s", line, err, out)
		}
	}
	// The final stage copies the binary from the build stage's WORKDIR and
	// runs it as the ENTRYPOINT.
	final := df.stages[len(df.stages)-1]
	var src, dest string
	var entrypoint []string
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.CopyCommand:
			if c.From == build.Name && len(c.SourcePaths) == 1 {
				src, dest = c.SourcePaths[0], c.DestPath
			}
		case *instructions.EntrypointCommand:
			entrypoint = c.CmdLine
		}
	}
	if src == "" || len(entrypoint) == 0 || entrypoint[0] != dest {
		return "", nil, fmt.Errorf("the final stage should COPY --from=%s the binary to the ENTRYPOINT's path; COPY %q -> %q, ENTRYPOINT %q", build.Name, src, dest, entrypoint)
	}
	rel, ok := strings.CutPrefix(src, strings.TrimSuffix(workdir, "/")+"/")
	if !ok {
		return "", nil, fmt.Errorf("COPY --from=%s %s is outside the build stage's WORKDIR %s", build.Name, src, workdir)
	}
	bin := filepath.Join(ctxDir, filepath.FromSlash(rel))
	if _, err := os.Stat(bin); err != nil {
		return "", nil, fmt.Errorf("the build stage did not produce %s: %w", src, err)
	}
	t.Logf("Dockerfile build stage: %d context files (after .dockerignore), RUNs took %v, binary %s -> %s",
		n, time.Since(start).Round(time.Millisecond), src, dest)
	return bin, entrypoint, nil
}

// buildEnv is the environment of a build-stage RUN: the stage's ENV and ARG
// defaults over the host's Go caches and PATH (the image's golang has its
// own; here it is the host's go, which the test itself runs on).
func buildEnv(stage map[string]string) []string {
	env := []string{"HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")}
	for _, k := range []string{"GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOSUMDB", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, "GOWORK=off")
	for k, v := range stage {
		env = append(env, k+"="+v)
	}
	return env
}

// copyBuildContext copies the repository into dir as `docker build .` would
// send it: without what .dockerignore excludes.
func copyBuildContext(dir string) (int, error) {
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		return 0, err
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		return 0, err
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return 0, err
	}
	n := 0
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil || rel == "." {
			return err
		}
		excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if excluded {
			if d.IsDir() && !pm.Exclusions() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dir, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			n++
			return copyFile(path, target)
		}
		return nil
	})
	return n, err
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestImageBinaryIsStaticAndTrimmed checks what the build stage produced:
// a statically linked binary (distroless static has no libc), built with
// -trimpath and CGO_ENABLED=0.
func TestImageBinaryIsStaticAndTrimmed(t *testing.T) {
	bin, entrypoint := buildImageBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a dynamic loader (PT_INTERP); distroless static cannot run it")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links shared libraries %v", libs)
	}
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	for _, want := range []string{"build\t-trimpath=true", "build\tCGO_ENABLED=0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("go version -m does not show %q:\n%s", want, out)
		}
	}
	// With -trimpath the build info omits -ldflags (go.dev/issue/52372), so
	// check the effect of -s -w instead: no symbol table, no DWARF.
	for _, sec := range []string{".symtab", ".debug_info"} {
		if f.Section(sec) != nil {
			t.Errorf("the binary has a %s section; -ldflags=\"-s -w\" should strip it", sec)
		}
	}
	t.Logf("ENTRYPOINT %q: static ELF, no shared libraries, stripped (no .symtab, no .debug_info); build settings:\n%s",
		entrypoint, grepLines(string(out), "\tbuild\t"))
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}

// rolloutdFlags lists the flags `rolloutd --help` documents.
func rolloutdFlags(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("rolloutd --help: %v\n%s", err, out)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) == 0 {
		t.Fatalf("rolloutd --help lists no flags:\n%s", out)
	}
	return flags
}

// clientEnvVars are the ROLLOUTD_* variables that the client commands'
// --help names (ROLLOUTD_ADDR).
func clientEnvVars(t *testing.T, bin string) []string {
	t.Helper()
	var vars []string
	for _, args := range [][]string{{"admin", "list", "--help"}, {"export", "--help"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("rolloutd %v: %v\n%s", args, err, out)
		}
		vars = append(vars, regexp.MustCompile(`ROLLOUTD_[A-Z][A-Z_]*[A-Z]`).FindAllString(string(out), -1)...)
	}
	slices.Sort(vars)
	return slices.Compact(vars)
}

// TestManifestSettingsAreRealFlags: every flag in the Deployment's args and
// every ROLLOUTD_* key of a ConfigMap or env entry names a flag that the
// built binary has.
func TestManifestSettingsAreRealFlags(t *testing.T) {
	bin, _ := buildImageBinary(t)
	flags := rolloutdFlags(t, bin)
	for _, dir := range []string{"base", "overlays/dev", "overlays/mtls", "overlays/aks"} {
		_, b := renderOnDisk(t, dir)
		c := rolloutdContainer(t, b)
		for _, a := range c.Args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !strings.HasPrefix(a, "-") || !slices.Contains(flags, name) {
				t.Errorf("%s: arg %q is not a rolloutd flag (rolloutd --help: %v)", dir, a, flags)
			}
		}
		keys := map[string]bool{}
		for _, e := range c.Env {
			keys[e.Name] = true
		}
		for _, cm := range b.configMaps {
			for k := range cm.Data {
				keys[k] = true
			}
		}
		for k := range keys {
			flag, ok := strings.CutPrefix(k, "ROLLOUTD_")
			if ok && !slices.Contains(flags, strings.ToLower(strings.ReplaceAll(flag, "_", "-"))) {
				t.Errorf("%s: %s names no rolloutd flag", dir, k)
			}
		}
	}
	// The tuning keys docs/operations.md suggests are real flags too, or a
	// variable of the client commands that their --help names (which the
	// server's settings above may not hold).
	clientVars := clientEnvVars(t, bin)
	for _, k := range regexp.MustCompile(`ROLLOUTD_[A-Z][A-Z_]*[A-Z]`).FindAllString(string(readRepoFile(t, opsDoc)), -1) {
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "ROLLOUTD_"), "_", "-"))
		if !slices.Contains(flags, flag) && !slices.Contains(clientVars, k) {
			t.Errorf("%s mentions %s, which names no rolloutd flag and no variable of rolloutd admin or export (their --help)", opsDoc, k)
		}
	}
	t.Logf("rolloutd --help flags: %v", flags)
}

// serverEnv is the container's environment from the rendered manifests:
// envFrom ConfigMaps, then literal env entries. Secret references are left
// out (the caller supplies credentials).
func serverEnv(b *bundle, c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		if cm := b.configMap(ef.ConfigMapRef.Name); cm != nil {
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is a child process whose output is kept.
type proc struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error // valid after done is closed
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// startProc starts argv with env. The child dies with the test binary (it
// is started from a locked OS thread that outlives it, so the parent-death
// signal fires only when the test process goes), and is killed when the
// test ends.
func startProc(t *testing.T, dir string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(argv[0], argv[1:]...), out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	setDeathSignal(p.cmd)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", filepath.Base(argv[0]), p.out.String())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runEntrypoint starts the image's binary as the rendered Deployment would
// (its args, its ConfigMap environment), with the listeners moved to free
// loopback ports and the credentials replaced by connectionString, and
// checks it end to end: health, reflection, Append and Get through the
// published shard-affine client config, the dashboard's metrics, and a
// graceful exit on SIGTERM within the grace period.
func runEntrypoint(t *testing.T, b *bundle, connectionString string) {
	bin, entrypoint := buildImageBinary(t)
	d := b.deployment(appName)
	c := rolloutdContainer(t, b)
	grpcAddr, metricsAddr := freePort(t), freePort(t)

	// The Deployment's args, with --listen and --metrics-listen moved.
	var args []string
	var moved []string
	for _, a := range c.Args {
		switch name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); name {
		case "listen":
			a = "--listen=" + grpcAddr
			moved = append(moved, a)
		case "metrics-listen":
			a = "--metrics-listen=" + metricsAddr
			moved = append(moved, a)
		}
		args = append(args, a)
	}
	if len(moved) != 2 {
		t.Fatalf("the Deployment's args %q should set --listen and --metrics-listen", c.Args)
	}
	// The ConfigMap's environment; Azurite's connection string instead of
	// the account URL, which needs workload identity.
	env := serverEnv(b, c)
	delete(env, "AZURE_STORAGE_ACCOUNT_URL")
	env["AZURE_STORAGE_CONNECTION_STRING"] = connectionString
	home := t.TempDir() // like distroless' /home/nonroot, the working directory
	environ := []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	var shown []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
		if k != "AZURE_STORAGE_CONNECTION_STRING" {
			shown = append(shown, k+"="+v)
		}
	}
	sort.Strings(shown)
	t.Logf("starting %s (ENTRYPOINT %q) %s\n  env: %s AZURE_STORAGE_CONNECTION_STRING=<Azurite>\n  overrides: %s; AZURE_STORAGE_ACCOUNT_URL dropped (workload identity cannot authenticate to Azurite)",
		filepath.Base(bin), entrypoint, strings.Join(args, " "), strings.Join(shown, " "), strings.Join(moved, " "))
	p := startProc(t, home, environ, append([]string{bin}, args...)...)

	// Health: the probes' service ("") and RolloutService answer SERVING.
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	start := time.Now()
	for _, svc := range []string{"", rolloutv1.RolloutService_ServiceDesc.ServiceName} {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			cancel()
			if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if p.exited() {
				t.Fatalf("rolloutd exited (%v) before serving:\n%s", p.err, p.out.String())
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("health %q not SERVING after 30s (last: %v, %v)", svc, resp, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("grpc.health.v1 Check(\"\") and Check(%q): SERVING after %v", rolloutv1.RolloutService_ServiceDesc.ServiceName, time.Since(start).Round(time.Millisecond))

	// Reflection, as `grpcurl list` uses it.
	services := listServices(t, cc)
	for _, want := range []string{"rollout.v1.RolloutService", "grpc.health.v1.Health"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, without %s", services, want)
		}
	}
	t.Logf("reflection (grpcurl list): %v", services)

	// Append and Get through the published client: dns:/// and ring_hash on
	// the shard header.
	ac, err := client.New("dns:///"+grpcAddr, client.WithAffinity(true))
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := ac.Append(ctx, "deploycheck/entrypoint", []*rolloutv1.Record{
		{Id: "turn-1", RolloutId: "r1", Role: rolloutv1.Role_ROLE_USER, Content: "2+2?"},
		{Id: "turn-2", RolloutId: "r1", Role: rolloutv1.Role_ROLE_ASSISTANT, Content: "4"},
	})
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	got, err := ac.Get(ctx, "deploycheck/entrypoint", "turn-2")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.GetContent() != "4" {
		t.Fatalf("Get returned %v", got)
	}
	t.Logf("Append: %v; Get turn-2: seq %d content %q", app, got.GetSeq(), got.GetContent())

	// The grpcurl session of docs/operations.md: the same calls, and the
	// same answers (but for server-assigned timestamps).
	calls, listOutput := docGrpcurlCalls(t)
	if got := strings.Join(services, "\n"); got != listOutput {
		t.Errorf("%s shows `grpcurl list` printing\n%s\nthe server lists\n%s", opsDoc, listOutput, got)
	}
	for _, call := range calls {
		var resp proto.Message
		var err error
		if call.method == "grpc.health.v1.Health/Check" {
			req := &healthpb.HealthCheckRequest{}
			if call.payload != "" {
				err = protojson.Unmarshal([]byte(call.payload), req)
			}
			if err == nil {
				resp, err = health.Check(ctx, req)
			}
		} else {
			var req proto.Message
			req, err = newRequest(call.method, call.payload)
			if err == nil {
				resp = map[string]proto.Message{
					"rollout.v1.RolloutService/Append": &rolloutv1.AppendResponse{},
					"rollout.v1.RolloutService/Get":    &rolloutv1.GetResponse{},
				}[call.method]
				err = cc.Invoke(ctx, "/"+call.method, req, resp)
			}
		}
		if err != nil {
			t.Errorf("%s: grpcurl ... %s: %v", opsDoc, call.method, err)
			continue
		}
		got := protojson.Format(resp)
		if same, err := jsonEqualIgnoring(got, call.output, "createdAt"); err != nil || !same {
			t.Errorf("%s: grpcurl ... %s shows\n%s\nthe server answers\n%s (%v)", opsDoc, call.method, call.output, got, err)
		}
	}
	t.Logf("%s: grpcurl list and %d calls replayed; the server's answers match the transcript", opsDoc, len(calls))

	// Every metric the dashboard queries is exported.
	exported := scrapeMetricNames(t, "http://"+metricsAddr+"/metrics")
	var missing []string
	for _, m := range dashboardMetrics(t) {
		if !exported[m] {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the dashboard queries metrics that /metrics does not export: %v", missing)
	} else {
		t.Logf("/metrics exports every metric the dashboard queries (%d series names exported)", len(exported))
	}

	// SIGTERM: health turns NOT_SERVING at once (the readiness probe fails
	// and the pod leaves the Services), and the process exits 0 within the
	// grace period.
	grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	stopped := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING {
			t.Logf("after SIGTERM: health NOT_SERVING within %v", time.Since(stopped).Round(time.Millisecond))
			break
		}
		if p.exited() || time.Since(stopped) > 3*time.Second {
			t.Errorf("health did not report NOT_SERVING within 3s of SIGTERM (last: %v, %v)", resp, err)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		t.Fatalf("rolloutd did not exit within terminationGracePeriodSeconds (%v) of SIGTERM", grace)
	}
	if p.err != nil {
		t.Fatalf("rolloutd exited with %v after SIGTERM:\n%s", p.err, p.out.String())
	}
	t.Logf("SIGTERM -> exit 0 after %v (terminationGracePeriodSeconds %v)", time.Since(stopped).Round(time.Millisecond), grace)
}

func listServices(t *testing.T, cc *grpc.ClientConn) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	sort.Strings(names)
	return names
}

// scrapeMetricNames fetches a Prometheus text exposition and returns the
// sample names in it.
func scrapeMetricNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestEntrypointServesOnAzurite starts the image's binary with the base's
// args and ConfigMap against an Azurite from internal/testutil/azurite.
func TestEntrypointServesOnAzurite(t *testing.T) {
	az := azurite.Start(t, azurite.Options{})
	_, b := renderOnDisk(t, "base")
	runEntrypoint(t, b, az.ConnectionString)
}

// TestDevOverlayServesOnItsAzurite starts Azurite 3.35.0 (the version the
// repository pins) with the dev overlay's own command line, then the
// image's binary with the dev overlay's args and ConfigMap, and the
// connection string of the Secret that docs/operations.md creates, pointed
// at that Azurite.
func TestDevOverlayServesOnItsAzurite(t *testing.T) {
	_, dev := renderOnDisk(t, "overlays/dev")
	endpoint := startOverlayAzurite(t, dev)
	conn := docConnectionString(t, string(readRepoFile(t, opsDoc)), dev)
	inCluster := regexp.MustCompile(`BlobEndpoint=http://[^/;]+/`).FindString(conn)
	if inCluster == "" {
		t.Fatalf("no BlobEndpoint in %s", conn)
	}
	conn = strings.Replace(conn, inCluster, "BlobEndpoint="+endpoint+"/", 1)
	t.Logf("the docs' connection string, with %s replaced by %s", inCluster, endpoint)
	runEntrypoint(t, dev, conn)
}

// startOverlayAzurite runs the dev overlay's Azurite container command with
// the local Azurite install, moved to a free loopback port, and returns
// its endpoint (http://127.0.0.1:PORT).
func startOverlayAzurite(t *testing.T, dev *bundle) string {
	t.Helper()
	d := dev.deployment("azurite")
	if d == nil {
		t.Fatal("the dev overlay has no Deployment/azurite")
	}
	c := container(&d.Spec.Template.Spec, "azurite")
	if c == nil || len(c.Command) != 1 || c.Command[0] != "azurite-blob" {
		t.Fatalf("the azurite container should run azurite-blob; got %v", c)
	}
	bin := filepath.Join(repoRoot, "test", "azurite", "node_modules", ".bin", "azurite-blob")
	if _, err := os.Stat(bin); err != nil {
		azurite.Start(t, azurite.Options{}) // installs the pinned Azurite (npm ci)
	}
	var args []string
	for _, a := range c.Args {
		switch name, _, _ := strings.Cut(a, "="); name {
		case "--blobHost":
			a = "--blobHost=127.0.0.1"
		case "--blobPort":
			a = "--blobPort=0"
		}
		args = append(args, a)
	}
	home := t.TempDir()
	p := startProc(t, home, []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, append([]string{bin}, args...)...)
	listening := regexp.MustCompile(`successfully listens on (http://127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := listening.FindStringSubmatch(p.out.String()); m != nil {
			t.Logf("azurite-blob %s: listening on %s", strings.Join(args, " "), m[1])
			return m[1]
		}
		if p.exited() {
			t.Fatalf("Azurite rejected the dev overlay's args %q (%v):\n%s", args, p.err, p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("Azurite not listening after 60s:\n%s", p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
