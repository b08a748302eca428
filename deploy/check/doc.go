// Package check holds the offline tests of rolloutd's deployment artifacts,
// each run with the real parser or tool:
//
//   - every manifest under deploy/k8s decodes strictly into k8s.io/api types
//     (apimachinery's serializer with Strict: true), and every
//     kustomization.yaml strictly into kustomize's types; a misspelled field
//     fails (testdata/misspelled-deployment.yaml shows it);
//   - the base and the dev overlay render in-process with kustomize's krusty, and the rendered
//     objects pass cross-field rules: selectors match template labels, probe
//     and Service ports match container ports, terminationGracePeriodSeconds
//     exceeds the effective --shutdown-timeout (from the args or the
//     ConfigMap), no image is :latest, workload identity is wired up, no
//     Secret and no key-like env var or ConfigMap value, a locked-down
//     securityContext, NetworkPolicy and HPA targets; each rule is also shown
//     to fire on a broken copy.
//
// The package is its own Go module (deploy/check/go.mod) so that the heavy
// tool dependencies (k8s.io/api, kustomize, buildkit) stay out of the root
// module; scripts/test.sh runs it. It has no non-test code.
package check
