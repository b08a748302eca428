package check

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var updateReadme = flag.Bool("update-readme", false,
	"rewrite the outputs of README.md's transcripts with what the binaries print")

const readmeDoc = "README.md"

// transcriptTools builds rolloutd from this checkout, and grpcurl and
// grpc-health-probe at the versions the README names (pinned by
// tools/grpcurl/go.mod). They go to a directory of the user's cache kept
// per checkout, because `go build -o` leaves a binary that is up to date
// alone: a rerun takes seconds instead of three links.
func transcriptTools(t *testing.T) map[string]string {
	t.Helper()
	sum := sha256.Sum256([]byte(repoRoot))
	dir := t.TempDir()
	if cache, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(cache, "rolloutd-deploy-check", hex.EncodeToString(sum[:6]))
	}
	builds := []struct{ name, modfile, pkg string }{
		{"rolloutd", "", "./cmd/rolloutd"},
		{"grpcurl", "tools/grpcurl/go.mod", "github.com/fullstorydev/grpcurl/cmd/grpcurl"},
		{"grpc-health-probe", "tools/grpcurl/go.mod", "github.com/grpc-ecosystem/grpc-health-probe"},
	}
	bins := map[string]string{}
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	start := time.Now()
	for i, b := range builds {
		bins[b.name] = filepath.Join(dir, b.name)
		args := []string{"build", "-o", bins[b.name]}
		if b.modfile != "" {
			args = append(args, "-modfile="+b.modfile)
		}
		cmd := exec.Command("go", append(args, b.pkg)...)
		cmd.Dir = repoRoot
		wg.Go(func() {
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("built rolloutd, grpcurl and grpc-health-probe in %v", time.Since(start).Round(time.Millisecond))
	return bins
}

// transcriptRun runs the commands of the README's transcripts in one
// working directory, with the README's ports mapped to free ones.
type transcriptRun struct {
	t     *testing.T
	dir   string
	env   []string
	bins  map[string]string
	ports map[string]string // README port -> port of this run
	last  time.Time         // when the last command ended

	plaintext, mtls *proc
}

// port returns the free port standing in for the README's port p.
func (r *transcriptRun) port(p string) string {
	if r.ports[p] == "" {
		_, free, _ := net.SplitHostPort(freePort(r.t))
		r.ports[p] = free
	}
	return r.ports[p]
}

var readmePort = regexp.MustCompile(`:(50051|50052|8082|9090|9091)\b`)

// mapPorts puts this run's ports in place of the README's in an argument;
// a bare `:PORT` listens on loopback only.
func (r *transcriptRun) mapPorts(arg string) string {
	if m := readmePort.FindStringSubmatch(arg); m != nil && m[0] == arg {
		return "127.0.0.1:" + r.port(m[1])
	}
	return readmePort.ReplaceAllStringFunc(arg, func(s string) string { return ":" + r.port(s[1:]) })
}

// unmapPorts puts the README's ports back in place of this run's.
func (r *transcriptRun) unmapPorts(s string) string {
	for readme, free := range r.ports {
		s = regexp.MustCompile(`:`+free+`\b`).ReplaceAllString(s, ":"+readme)
	}
	return s
}

// argv turns a README command into the argv to run. The names a transcript
// may run are grpcurl, grpc-health-probe and rolloutd (as `rolloutd`,
// `bin/rolloutd` or `./bin/rolloutd`); any other fails the test. `rolloutd
// admin` without --addr gets the README's default address, so that it
// reaches this run's port.
func (r *transcriptRun) argv(cmd string) ([]string, error) {
	w := shellWords(cmd)
	if len(w) == 0 {
		return nil, fmt.Errorf("an empty command")
	}
	name := w[0]
	switch name {
	case "rolloutd", "bin/rolloutd", "./bin/rolloutd":
		name = "rolloutd"
		if len(w) > 2 && w[1] == "admin" && !slices.ContainsFunc(w, func(a string) bool { return strings.HasPrefix(a, "--addr") }) {
			w = slices.Insert(w, 3, "--addr", "localhost:50051")
		}
	case "grpcurl", "grpc-health-probe":
	default:
		return nil, fmt.Errorf("%q is not a command the transcript test knows (grpcurl, grpc-health-probe, rolloutd)", name)
	}
	argv := []string{r.bins[name]}
	for _, a := range w[1:] {
		argv = append(argv, r.mapPorts(a))
	}
	return argv, nil
}

// olderThan is a purge's idle age: the command waits it out since the
// previous command, as a person typing the session would have.
var olderThan = regexp.MustCompile(`--older-than[ =](\S+)`)

// run runs a README command and returns its output (stdout and stderr as
// they interleave) with the README's ports.
func (r *transcriptRun) run(cmd string) (string, error) {
	argv, err := r.argv(cmd)
	if err != nil {
		return "", err
	}
	if m := olderThan.FindStringSubmatch(cmd); m != nil {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			return "", err
		}
		time.Sleep(time.Until(r.last.Add(d + 100*time.Millisecond)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Dir, c.Env = r.dir, r.env
	out, _ := c.CombinedOutput() // failing commands are shown failing
	r.last = time.Now()
	if ctx.Err() != nil {
		return "", fmt.Errorf("timed out:\n%s", out)
	}
	return r.unmapPorts(strings.TrimSpace(string(out))), nil
}

// waitServing waits until the plaintext health service at addr answers
// SERVING.
func waitServing(t *testing.T, p *proc, addr string) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if p.exited() {
			t.Fatalf("rolloutd exited (%v) before serving:\n%s", p.err, p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not SERVING after 30s (last: %v, %v)", addr, resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startPlaintext starts rolloutd as `make run` does (no flags; the store
// ./rolloutd-data), with its listeners on this run's ports. With fresh, it
// first stops the one it started before and removes its store.
func (r *transcriptRun) startPlaintext(fresh bool) {
	if r.plaintext != nil {
		if !fresh {
			return
		}
		_ = r.plaintext.cmd.Process.Kill()
		<-r.plaintext.done
		if err := os.RemoveAll(filepath.Join(r.dir, "rolloutd-data")); err != nil {
			r.t.Fatal(err)
		}
	}
	r.plaintext = startProc(r.t, r.dir, r.env, r.bins["rolloutd"],
		"--listen", r.mapPorts(":50051"), "--metrics-listen", r.mapPorts(":9090"))
	waitServing(r.t, r.plaintext, "127.0.0.1:"+r.port("50051"))
}

// startMTLS follows the README's mTLS setup: it runs the ```sh block that
// makes dev-tls (openssl), saves the README's policy where the block says
// to, and starts the server with the block's own command line.
func (r *transcriptRun) startMTLS(readme string) {
	t := r.t
	if r.mtls != nil {
		return
	}
	var block string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		if strings.Contains(m[1], "--tls-client-ca") {
			block = strings.ReplaceAll(m[1], "\\\n", "")
		}
	}
	policy := regexp.MustCompile("(?s)```yaml\n(grants:.*?)```").FindStringSubmatch(readme)
	save := regexp.MustCompile(`save the policy above as (\S+)`).FindStringSubmatch(block)
	if block == "" || policy == nil || save == nil {
		t.Fatalf("%s: no ```sh block with --tls-client-ca that says where to `save the policy above as`, or no ```yaml policy", readmeDoc)
	}
	var script, server []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		if w := shellWords(l); len(w) > 0 && strings.HasSuffix(w[0], "bin/rolloutd") {
			server = w
		} else {
			script = append(script, l)
		}
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("the README's mTLS session makes its certificates with openssl, which is not on PATH")
	}
	sh := exec.Command("sh", "-ec", strings.Join(script, "\n"))
	sh.Dir, sh.Env = r.dir, r.env
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the README's mTLS setup:\n%s\nfailed: %v\n%s", strings.Join(script, "\n"), err, out)
	}
	if err := os.WriteFile(filepath.Join(r.dir, save[1]), []byte(policy[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	if server == nil {
		t.Fatalf("%s: the mTLS block starts no bin/rolloutd", readmeDoc)
	}
	argv := []string{r.bins["rolloutd"]}
	health := ""
	for i, a := range server[1:] {
		argv = append(argv, r.mapPorts(a))
		if i > 0 && server[i] == "--health-listen" {
			health = r.mapPorts(a)
		}
	}
	if health == "" {
		t.Fatalf("%s: the mTLS server has no --health-listen to wait on", readmeDoc)
	}
	r.mtls = startProc(t, r.dir, r.env, argv...)
	waitServing(t, r.mtls, health)
}

// readmeMayDiffer is how the README states what the test normalises: its
// transcripts must say so, in these words, so that the list cannot change
// without the README.
const readmeMayDiffer = "differ from a run only in the server-assigned record ids (random UUIDv7s), the times, the ports" +
	" (the test listens on free ones, and gives `rolloutd admin` its `--addr`), the byte counts, by at most 6 bytes a record" +
	", and whether a plaintext dial of the TLS port fails with `EOF` or `connection reset by peer`"

// TestReadmeTranscripts runs the README's console transcripts against
// rolloutd built from this checkout, with the grpcurl and grpc-health-probe
// the README names: in README order, on one plaintext server (started as
// `make run` starts it, on a fresh store) and one mTLS server (set up by the
// README's own openssl commands, policy and command line), since later
// commands depend on earlier ones. Each command's output must be the one
// shown but for what readmeMayDiffer lists. -update-readme writes the
// outputs of the run into the README instead.
func TestReadmeTranscripts(t *testing.T) {
	readme := string(readRepoFile(t, readmeDoc))
	blocks, err := parseTranscripts(readme)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(readme), " "), readmeMayDiffer) {
		t.Errorf("%s should say that its transcripts %s", readmeDoc, readmeMayDiffer)
	}
	tmp := t.TempDir()
	r := &transcriptRun{t: t, dir: filepath.Join(tmp, "work"), ports: map[string]string{},
		env: []string{"HOME=" + tmp, "PATH=" + os.Getenv("PATH")}}
	if err := os.Mkdir(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.bins = transcriptTools(t)
	sessions := map[string]func(){
		"plaintext":              func() { r.startPlaintext(false) },
		"plaintext, fresh store": func() { r.startPlaintext(true) },
		"mtls":                   func() { r.startMTLS(readme) },
	}
	var shown, got normalizer
	updated := readme
	ran := 0
	start := time.Now()
	var bodies []string
	for _, b := range blocks {
		outputs := make([]string, len(b.cmds))
		for i, c := range b.cmds {
			outputs[i] = c.shown
		}
		bodies = append(bodies, readme[b.start:b.end])
		if why, ok := strings.CutPrefix(b.session, notRun); ok {
			t.Logf("%s:%d: not run (%s)", readmeDoc, b.line, why)
			continue
		}
		startSession, ok := sessions[b.session]
		if !ok {
			t.Errorf("%s:%d: transcript session %q is not one the test knows (plaintext, \"plaintext, fresh store\", mtls, %q)", readmeDoc, b.line, b.session, notRun+"WHY")
			continue
		}
		startSession()
		for i, c := range b.cmds {
			out, err := r.run(c.cmd)
			if err != nil {
				t.Errorf("%s:%d: $ %s: %v", readmeDoc, c.line, c.cmd, err)
				continue
			}
			ran++
			outputs[i] = out
			if shown.normalize(c.shown) != got.normalize(alignByteCounts(c.shown, out)) {
				t.Errorf("%s:%d: $ %s\nshows\n%s\nrolloutd's run printed\n%s", readmeDoc, c.line, c.cmd, c.shown, out)
			}
		}
		bodies[len(bodies)-1] = b.body(outputs)
	}
	t.Logf("ran %d commands of %d transcripts in %v", ran, len(blocks), time.Since(start).Round(time.Millisecond))
	if *updateReadme {
		for i := len(blocks) - 1; i >= 0; i-- {
			updated = updated[:blocks[i].start] + bodies[i] + updated[blocks[i].end:]
		}
		if err := os.WriteFile(filepath.Join(repoRoot, readmeDoc), []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the outputs of this run into %s", readmeDoc)
	}
}
