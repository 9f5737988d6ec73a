// Package verify holds the tests of deploy/ and the top-level Dockerfile:
// the Kubernetes manifests decoded into the API types, the Dockerfile
// parsed by BuildKit's parser and its entrypoint and health check run on
// this host, the Prometheus rules and dashboard checked against a live lcd,
// the systemd unit, and the release and image scripts.
//
// It is a module of its own so that its dependencies stay out of the
// server's. Run it through deploy/test.sh, which installs the tools the
// tests call (promtool, systemd-analyze, zip, shellcheck); the tests fail,
// rather than skip, when one is missing.
package verify
