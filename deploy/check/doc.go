// Package check holds the offline tests of rolloutd's deployment artifacts,
// each run with the real parser or tool:
//
//   - every manifest under deploy/k8s decodes strictly into k8s.io/api types
//     (apimachinery's serializer with Strict: true), and every
//     kustomization.yaml strictly into kustomize's types; a misspelled field
//     fails (testdata/misspelled-deployment.yaml shows it);
//   - the base, the dev overlay and the overlay that docs/operations.md
//     writes (its heredoc, with the shell variables filled in) render
//     in-process with kustomize's krusty, and the rendered
//     objects pass cross-field rules: selectors match template labels, probe
//     and Service ports match container ports, terminationGracePeriodSeconds
//     exceeds the effective --shutdown-timeout (from the args or the
//     ConfigMap), no image is :latest, workload identity is wired up, no
//     Secret and no key-like env var or ConfigMap value, a locked-down
//     securityContext, NetworkPolicy and HPA targets, a liveness probe that
//     outlasts the shutdown, GOMEMLIMIT below the memory limit; each rule is
//     also shown to fire on a broken copy;
//   - the Dockerfile passes buildkit's own lint rules
//     (dockerfile2llb.DockerfileLint with a stub MetaResolver, no network),
//     its final stage is non-root with an exec-form ENTRYPOINT, and every
//     COPY --from names an earlier stage (testdata/bad.Dockerfile shows each
//     rule firing);
//   - the Dockerfile's build stage runs: its RUN lines execute on a copy of
//     the build context filtered by .dockerignore, and make a static,
//     stripped, -trimpath binary at the path the final stage copies to its
//     ENTRYPOINT;
//   - that binary starts with the rendered Deployment's args and ConfigMap
//     environment against Azurite (credentials from
//     AZURE_STORAGE_CONNECTION_STRING, since workload identity cannot
//     authenticate to Azurite), answers grpc.health.v1 SERVING, lists its
//     services by reflection, serves Append and Get through the published
//     shard-affine client config, exports every metric the Grafana dashboard
//     queries, and on SIGTERM reports NOT_SERVING and exits 0 within the
//     grace period; every flag and ROLLOUTD_* key in the manifests is one
//     that `rolloutd --help` lists;
//   - the same binary serves the dev overlay's settings against Azurite
//     3.35.0 started with the overlay's own command line, through the
//     connection string of the Secret that docs/operations.md creates;
//   - docs/operations.md matches the manifests: its grpcurl session is
//     replayed against the running binary and must print what the doc
//     shows, its kubectl namespaces, object names and port-forwards exist,
//     the federated credential names the rendered service account, the
//     timeouts it quotes are the Deployment's, and every ROLLOUTD_* key it
//     suggests is a real flag, or a variable of the client commands that
//     their --help names (ROLLOUTD_ADDR);
//   - the README's console transcripts run, in order, against rolloutd
//     built from this checkout (a plaintext server as `make run` starts it,
//     and the mTLS server its openssl commands and policy set up), with
//     grpcurl and grpc-health-probe pinned by tools/grpcurl/go.mod, and
//     each command prints what the README shows, but for what the README
//     says may differ (random ids, times, ports, a few bytes a record);
//     every console block is marked with the server it runs on, and an
//     unknown marker or command fails;
//   - every query of deploy/grafana/rolloutd-dashboard.json parses with
//     Prometheus' own PromQL parser;
//   - the alert rules (deploy/k8s/monitoring) decode strictly with the
//     Prometheus Operator's own PrometheusRule type, pass Prometheus' rule
//     file validation (rulefmt: expressions, templates, durations), alert
//     on every condition the docs name, and select only rolloutd metrics
//     that the binary, started under mutual TLS with a policy, exports,
//     names recorded in the same file, or external names on an allow-list
//     (externalMetrics); every alert's runbook_url is its own section of
//     docs/runbooks.md; the SLO burn-rate thresholds match the objectives;
//     and the newer alerts, evaluated by Prometheus' engine, fire on series
//     that should fire them and stay quiet on others;
//   - the monitoring component's PodMonitor, rendered with overlays/aks,
//     selects the server's pods, gives them the job the alerts select, and
//     scrapes the port, path, scheme and CA the Deployment serves metrics
//     with;
//   - the aks overlay (mtls plus the AKS values) passes the same rules as
//     the mtls overlay, and is the text docs/operations.md writes;
//   - the optional parts (components/purge, export, monitoring) compose on
//     the aks overlay: with each, every object of the overlay renders
//     byte-identical and only the part's own objects are added, and the aks
//     example policy grants the purge job's identity what it needs;
//   - the spiffe component (csi-driver-spiffe with approver-policy) renders
//     on the aks overlay and decodes strictly (CertificateRequestPolicy
//     against a local transcription of its fields): one root signs the
//     SVIDs and the server's chain, every Certificate has a policy bound in
//     its own namespace, none selects the SVIDs' issuer, and the policy's
//     identities have the form the driver issues.
//
// The package is its own Go module (deploy/check/go.mod) so that the heavy
// tool dependencies (k8s.io/api, kustomize, buildkit, prometheus) stay out of the root
// module; scripts/test.sh runs it. It has no non-test code.
package check
